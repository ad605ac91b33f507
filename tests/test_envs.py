import importlib
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import sb3_r2po.envs
from sb3_r2po.envs import MAZE_ID, NIM_ID, PONG_ID, Maze3x3Env, NimEnv, PongEnv
from sb3_r2po.envs.maze import MAZE_WALLS

ENV_IDS = [NIM_ID, PONG_ID, MAZE_ID]
ENV_CLASSES = [NimEnv, PongEnv, Maze3x3Env]


def track_ball(obs: np.ndarray) -> int:
    """Move the paddle towards the ball's y."""
    if obs[0] < obs[2]:
        return 1
    if obs[0] > obs[2]:
        return 0
    return 2


def rollout(env: gym.Env, policy, seed: int) -> tuple[list, list[float], bool, bool]:
    obs, _ = env.reset(seed=seed)
    observations, rewards = [obs], []
    while True:
        obs, reward, terminated, truncated, _ = env.step(policy(obs))
        observations.append(obs)
        rewards.append(float(reward))
        if terminated or truncated:
            return observations, rewards, terminated, truncated


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env(env_id):
    gym_check_env(gym.make(env_id).unwrapped)
    sb3_check_env(gym.make(env_id).unwrapped)


@pytest.mark.parametrize("env_id, env_class", list(zip(ENV_IDS, ENV_CLASSES, strict=True)))
@pytest.mark.parametrize("render_mode", ["ansi", "rgb_array"])
def test_render(env_id, env_class, render_mode):
    if render_mode not in env_class.metadata["render_modes"]:
        with pytest.raises(ValueError, match="render_mode"):
            env_class(render_mode=render_mode)
        return
    env = gym.make(env_id, render_mode=render_mode).unwrapped
    assert isinstance(env, env_class)
    gym_check_env(env)
    env.reset(seed=0)
    frame = env.render()
    if render_mode == "ansi":
        assert isinstance(frame, str) and frame
    else:
        assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_registration(env_id):
    assert env_id in gym.registry
    assert env_id.startswith("R2PO/")
    env = gym.make(env_id)
    assert env.spec.max_episode_steps == {NIM_ID: 1000, PONG_ID: 1000, MAZE_ID: 20}[env_id]
    assert env.spec.reward_threshold == {NIM_ID: 1.0, PONG_ID: 3.0, MAZE_ID: 0.9}[env_id]
    env.close()


def test_register_idempotent():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.reload(sb3_r2po.envs)
        sb3_r2po.envs.register_envs()
    for env_id in ENV_IDS:
        assert env_id in gym.registry


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_determinism(env_id):
    def random_run(seed: int):
        env = gym.make(env_id)
        env.action_space.seed(seed)
        return rollout(env, lambda _obs: env.action_space.sample(), seed)

    obs_a, rew_a, *_ = random_run(3)
    obs_b, rew_b, *_ = random_run(3)
    assert rew_a == rew_b
    assert len(obs_a) == len(obs_b)
    for a, b in zip(obs_a, obs_b, strict=True):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- Nim


@pytest.mark.parametrize("sticks, expected", [(2, 1), (3, 2), (4, 3), (6, 1), (7, 2), (8, 3), (10, 1)])
def test_nim_optimal_opponent_move(sticks, expected):
    env = NimEnv()
    env.reset(seed=0)
    assert env.opponent_move(sticks) == expected
    assert (sticks - expected) % 4 == 1


@pytest.mark.parametrize("sticks", [1, 5, 9])
def test_nim_opponent_random_in_losing_position(sticks):
    env = NimEnv()
    env.reset(seed=0)
    moves = {env.opponent_move(sticks) for _ in range(200)}
    assert moves == set(range(1, min(3, sticks) + 1))


def test_nim_action_mapping():
    assert [NimEnv.action_to_move(a) for a in range(3)] == [1, 2, 3]
    env = NimEnv()
    env.reset(seed=0)
    # 10 - 3 = 7 sticks, then the opponent leaves 5.
    obs, reward, terminated, _, info = env.step(2)
    assert info["agent_move"] == 3 and info["opponent_move"] == 2
    assert obs == 5 and reward == 0.0 and not terminated


def test_nim_optimal_play_wins():
    """Taking 1 from 10 and then always leaving 4k + 1 sticks wins against any opponent reply."""

    def optimal(obs) -> int:
        move = (int(obs) + 3) % 4
        return max(move, 1) - 1

    for seed in range(10):
        observations, rewards, terminated, truncated = rollout(gym.make(NIM_ID), optimal, seed)
        assert observations[0] == 10
        # The agent always leaves 4k + 1 sticks, so it never faces such a position itself.
        assert all(int(obs) % 4 != 1 for obs in observations[:-1])
        assert rewards[-1] == 1.0 and sum(rewards) == 1.0
        assert terminated and not truncated
        assert observations[-1] == 0


def test_nim_opponent_takes_last_stick():
    env = NimEnv()
    env.reset(seed=0)
    env.sticks = 2
    obs, reward, terminated, _, info = env.step(0)  # leaves 1: the opponent must take it
    assert info["opponent_move"] == 1
    assert obs == 0 and reward == 1.0 and terminated


@pytest.mark.parametrize("action", [0, 1, 2])
def test_nim_misere_agent_takes_last_stick_loses(action):
    env = NimEnv()
    env.reset(seed=0)
    env.sticks = action + 1
    obs, reward, terminated, truncated, info = env.step(action)
    assert obs == 0 and reward == -1.0 and terminated and not truncated
    assert not info["illegal_move"]


@pytest.mark.parametrize("sticks, action", [(1, 1), (1, 2), (2, 2)])
def test_nim_illegal_move_loses(sticks, action):
    env = NimEnv()
    env.reset(seed=0)
    env.sticks = sticks
    obs, reward, terminated, _, info = env.step(action)
    assert reward == -1.0 and terminated and info["illegal_move"]
    assert obs == sticks


def test_nim_losing_line_against_optimal_opponent():
    """From 10, taking 3 leaves 7: the opponent leaves 5 and then keeps the agent on 4k + 1."""
    _, rewards, terminated, _ = rollout(gym.make(NIM_ID), lambda obs: 2 if int(obs) > 3 else 0, seed=0)
    assert terminated and sum(rewards) == -1.0


# ---------------------------------------------------------------- Pong


def test_pong_spaces():
    env = PongEnv()
    assert env.observation_space.shape == (5,) and env.observation_space.dtype == np.float32
    assert env.action_space == gym.spaces.Discrete(3)
    obs, _ = env.reset(seed=0)
    assert obs[0] == 300.0 and obs[1] == 400.0 and obs[2] == 300.0
    assert abs(obs[3]) == 5.0 and abs(obs[4]) <= 5.0


@pytest.mark.parametrize("action, expected", [(0, 295.0), (1, 305.0), (2, 300.0)])
def test_pong_paddle_moves(action, expected):
    env = PongEnv()
    env.reset(seed=0)
    obs, *_ = env.step(action)
    assert obs[0] == expected


def test_pong_paddle_stays_in_court():
    env = PongEnv()
    env.reset(seed=0)
    for _ in range(100):
        env.step(0)
    assert env.paddle_y == 40.0


@pytest.mark.parametrize("dy, y0", [(-5.0, 7.0), (5.0, 593.0)])
def test_pong_wall_bounce(dy, y0):
    env = PongEnv()
    env.reset(seed=0)
    env.ball[:] = (400.0, y0)
    env.velocity[:] = (5.0, dy)
    obs, reward, terminated, *_ = env.step(2)
    assert obs[4] == -dy
    assert 5.0 <= obs[2] <= 595.0
    assert obs[2] == pytest.approx(y0 + 1.0 if dy < 0 else y0 - 1.0)
    assert reward == 0.0 and not terminated


def test_pong_return_gives_reward():
    env = PongEnv()
    env.reset(seed=0)
    env.ball[:] = (20.0, 300.0)
    env.velocity[:] = (-5.0, 0.0)
    obs, reward, terminated, _, info = env.step(2)
    assert reward == 1.0 and not terminated and info["returned"]
    assert obs[3] == 5.0 and obs[1] == 15.0


@pytest.mark.parametrize("ball_y, returned", [(345.0, True), (255.0, True), (345.5, False), (254.5, False)])
def test_pong_return_window_is_half_the_paddle_plus_the_ball_radius(ball_y, returned):
    env = PongEnv()
    env.reset(seed=0)  # paddle centre 300: returned within 40 + 5
    env.ball[:] = (18.0, ball_y)
    env.velocity[:] = (-5.0, 0.0)
    obs, reward, terminated, _, info = env.step(2)
    assert info["returned"] is returned and reward == float(returned) and terminated is not returned
    if returned:  # reflected off the paddle line x = 15: 18 - 5 = 13 comes back to 17
        assert obs[1] == 17.0 and obs[3] == 5.0


def test_pong_serve_goes_either_way():
    velocities = np.array([PongEnv().reset(seed=seed)[0][3:] for seed in range(30)])
    assert set(velocities[:, 0]) == {-5.0, 5.0}
    assert (velocities[:, 1] < 0).any() and (velocities[:, 1] > 0).any() and (np.abs(velocities[:, 1]) <= 5.0).all()


def test_pong_miss_terminates():
    env = PongEnv()
    env.reset(seed=0)
    env.ball[:] = (20.0, 500.0)
    env.velocity[:] = (-5.0, 0.0)
    _, reward, terminated, truncated, info = env.step(2)
    assert reward == 0.0 and terminated and not truncated
    assert info["missed_by"] == "agent"


def test_pong_opponent_miss_terminates():
    env = PongEnv()
    env.reset(seed=0)
    env.opponent_y = 40.0
    env.ball[:] = (780.0, 560.0)
    env.velocity[:] = (5.0, 0.0)
    _, reward, terminated, _, info = env.step(2)
    assert reward == 0.0 and terminated and info["missed_by"] == "opponent"


@pytest.mark.parametrize("seed", range(5))
def test_pong_track_ball_reaches_target(seed):
    env = gym.make(PONG_ID)
    _, rewards, *_ = rollout(env, track_ball, seed)
    # Three contacts fit in 1000 steps whichever way the ball is served: the best return is exactly 3.
    assert sum(rewards) == env.spec.reward_threshold == 3.0


def test_pong_idle_agent_misses():
    returns = []
    for seed in range(5):
        _, rewards, terminated, _ = rollout(gym.make(PONG_ID), lambda _obs: 2, seed)
        assert terminated
        returns.append(sum(rewards))
    assert np.mean(returns) < 3.0


@pytest.mark.parametrize("seed", range(5))
def test_pong_truncation(seed):
    env = gym.make(PONG_ID)
    _, rewards, terminated, truncated = rollout(env, track_ball, seed)
    # The opponent never misses, so an agent that never misses plays to the time limit.
    assert truncated and not terminated
    assert len(rewards) == 1000


def test_pong_observation_bounds():
    env = gym.make(PONG_ID)
    env.action_space.seed(1)
    observations, *_ = rollout(env, lambda _obs: env.action_space.sample(), seed=1)
    for obs in observations:
        assert env.observation_space.contains(obs)


# ---------------------------------------------------------------- Maze


def test_maze_spaces():
    env = Maze3x3Env()
    assert env.observation_space == gym.spaces.Discrete(9)
    assert env.action_space == gym.spaces.Discrete(4)
    obs, _ = env.reset(seed=0)
    assert obs == 0
    assert Maze3x3Env.cell_to_state((2, 2)) == 8
    assert Maze3x3Env.state_to_cell(5) == (2, 1)


def test_maze_shortest_path():
    assert Maze3x3Env.shortest_path_length() == 6
    # Longer than the Manhattan distance.
    assert Maze3x3Env.shortest_path_length() > 4


def test_maze_optimal_path_return():
    env = gym.make(MAZE_ID)
    env.reset(seed=0)
    path = [2, 2, 1, 3, 1, 2]  # E, E, S, W, S, E
    total = 0.0
    for i, action in enumerate(path):
        obs, reward, terminated, _, _ = env.step(action)
        total += reward
        assert terminated == (i == len(path) - 1)
    assert obs == 8
    assert total == pytest.approx(1.0 - 5 * 0.1 / 9)
    assert total >= env.spec.reward_threshold


@pytest.mark.parametrize("wall", sorted(sorted(w) for w in MAZE_WALLS))
def test_maze_walls_block(wall):
    (ax, ay), (bx, by) = wall
    action = 2 if bx > ax else 1  # east or south, from a to b
    back = 3 if bx > ax else 0
    assert Maze3x3Env.next_cell((ax, ay), action) == (ax, ay)
    assert Maze3x3Env.next_cell((bx, by), back) == (bx, by)


@pytest.mark.parametrize("cell, action", [((0, 0), 0), ((0, 0), 3), ((2, 0), 2), ((0, 2), 1), ((1, 2), 1), ((2, 1), 2)])
def test_maze_boundaries_block(cell, action):
    assert Maze3x3Env.next_cell(cell, action) == cell


def test_maze_blocked_step_penalty():
    env = Maze3x3Env()
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(1)  # south from the start: wall
    assert obs == 0 and info["blocked"]
    assert reward == pytest.approx(-0.1 / 9)
    assert not terminated and not truncated
    obs, reward, *_ = env.step(2)  # east: free
    assert obs == 1 and reward == pytest.approx(-0.1 / 9)


def test_maze_truncation():
    env = gym.make(MAZE_ID)
    _, rewards, terminated, truncated = rollout(env, lambda _obs: 0, seed=0)
    assert truncated and not terminated
    assert len(rewards) == 20
    assert sum(rewards) == pytest.approx(-20 * 0.1 / 9)


def test_maze_all_cells_reachable():
    seen = {Maze3x3Env.start}
    frontier = [Maze3x3Env.start]
    while frontier:
        cell = frontier.pop()
        for action in range(4):
            nxt = Maze3x3Env.next_cell(cell, action)
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    assert len(seen) == 9


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_sb3_baseline_runs(env_id):
    """A Stable-Baselines3 baseline trains on the env without complaint (spaces start at 0, dtypes match)."""
    from stable_baselines3 import A2C

    model = A2C("MlpPolicy", env_id, n_steps=8, seed=0, device="cpu")
    model.learn(total_timesteps=16)
    obs = model.get_env().reset()
    action, _ = model.predict(obs, deterministic=True)
    assert model.action_space.contains(int(action[0]))
