"""Building blocks shared by the algorithm: parameter spaces, rollouts, evidence, parsing, asking the LLM."""
