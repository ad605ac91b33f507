"""Rollout throughput: R2PO's rollout engine against a plain single-env gymnasium loop, same policy.

    python benchmarks/rollout_throughput.py [--env CartPole-v1] [--episodes 40] [--repeats 3]

Prints environment steps per second for the baseline (a plain ``gym.make`` loop calling the same numpy
forward pass one observation at a time) and for ``sb3_r2po.common.rollouts.run_episodes`` on
DummyVecEnv / SubprocVecEnv with 1, 2 and 4 envs, with the ratio to the baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

from sb3_r2po.common.rollouts import run_episodes
from sb3_r2po.r2po.policies import LinearPolicy

# A decent CartPole controller (push towards where the pole falls): long episodes, so stepping dominates.
CARTPOLE_PARAMS = np.array([0, 0, 0, 0, 0, 1, 0, 1, 0, 0], dtype=np.float64)


def baseline(env_id: str, policy: LinearPolicy, params: np.ndarray, episodes: int) -> int:
    env = gym.make(env_id)
    steps = 0
    for episode in range(episodes):
        obs, _ = env.reset(seed=episode)
        done = False
        while not done:
            action = policy.act(obs[None], params)[0]
            obs, _, terminated, truncated, _ = env.step(action)
            steps += 1
            done = terminated or truncated
    env.close()
    return steps


def ours(env_id: str, policy: LinearPolicy, params: np.ndarray, episodes: int, n_envs: int, subproc: bool) -> int:
    vec_env = make_vec_env(env_id, n_envs=n_envs, seed=0, vec_env_cls=SubprocVecEnv if subproc else DummyVecEnv)
    result = run_episodes(vec_env, policy.actor(params), episodes, 10**6)
    vec_env.close()
    return sum(ep.length for ep in result.episodes)


def timed(fn, repeats: int) -> float:
    """Best steps/s over ``repeats`` runs (the least disturbed by other load on the machine)."""
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        steps = fn()
        best = max(best, steps / (time.perf_counter() - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    env = gym.make(args.env)
    policy = LinearPolicy(env.observation_space, env.action_space)
    params = CARTPOLE_PARAMS if args.env == "CartPole-v1" else np.zeros(policy.parameter_space.size)

    base = timed(lambda: baseline(args.env, policy, params, args.episodes), args.repeats)
    rows = [("plain gymnasium loop, 1 env (baseline)", base)]
    for subproc in (False, True):
        for n_envs in (1, 2, 4):
            name = f"run_episodes, {'SubprocVecEnv' if subproc else 'DummyVecEnv'} x {n_envs}"
            rows.append(
                (name, timed(lambda n=n_envs, s=subproc: ours(args.env, policy, params, args.episodes, n, s), args.repeats))
            )

    print(f"{args.env}, {args.episodes} episodes per measurement, best of {args.repeats}")
    print(f"| {'rollout engine':<42} | steps/s | ratio to baseline |")
    print(f"|{'-' * 44}|---------|-------------------|")
    for name, rate in rows:
        print(f"| {name:<42} | {rate:7.0f} | {rate / base:17.2f} |")


if __name__ == "__main__":
    main()
