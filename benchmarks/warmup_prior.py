"""What R2PO's warm-up draws are worth on an env: one episode each of many draws from the warm-up prior.

R2PO's warm-up (the paper's) draws every parameter of the linear policy from N(0, 3), rounded to the parameter
precision (``ParameterSpace.sample``). On CartPole the start states are within [-0.05, 0.05], so a bias term of
that scale decides the argmax on its own: the cart is pushed one way for the whole episode. The second row draws
the same vectors with the bias set to 0, to show how much of that is the bias.

Usage::

    python benchmarks/warmup_prior.py --env CartPole-v1 --draws 1000
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np

from sb3_r2po import R2PO


def episode(env: gym.Env, act, seed: int) -> tuple[float, int]:
    """The return of one episode and the number of distinct actions taken."""
    obs, _ = env.reset(seed=seed)
    actions, total, done = set(), 0.0, False
    while not done:
        action = np.asarray(act(obs[None]))[0]
        actions.add(action.tobytes())
        obs, reward, terminated, truncated, _ = env.step(action if action.shape else int(action))
        total += float(reward)
        done = terminated or truncated
    return total, len(actions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    model = R2PO("MlpLinear", args.env, llm=None, seed=args.seed)
    policy, space = model.policy, model.policy.parameter_space
    n_bias = int(np.prod(model.action_space.shape)) if isinstance(model.action_space, gym.spaces.Box) else model.action_space.n
    rng = np.random.default_rng(args.seed)
    draws = [space.sample(rng) for _ in range(args.draws)]
    no_bias = [np.concatenate([theta[:-n_bias], np.zeros(n_bias)]) for theta in draws]
    target = model.target
    env = gym.make(args.env)
    print(f"{args.env}, {args.draws} draws of R2PO's warm-up prior (seed {args.seed}), one episode each:\n")
    print("| draws | one action all episode | mean return | median | >= 100 | at the target |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, vectors in (("warm-up prior (every parameter ~ N(0, 3))", draws), ("the same vectors, bias set to 0", no_bias)):
        results = [episode(env, policy.actor(theta), args.seed + i) for i, theta in enumerate(vectors)]
        returns = np.array([r for r, _ in results])
        constant = np.mean([n == 1 for _, n in results]) * 100
        at_target = "-" if target is None else f"{(returns >= target).mean() * 100:.1f} %"
        print(
            f"| {name} | {constant:.1f} % | {returns.mean():.1f} | {np.median(returns):.0f} "
            f"| {(returns >= 100).mean() * 100:.1f} % | {at_target} |"
        )


if __name__ == "__main__":
    main()
