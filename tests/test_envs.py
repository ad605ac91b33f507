import importlib
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import sb3_r2po.envs
from sb3_r2po.envs import MAZE_ID, NIM_ID, PONG_ID, Maze3x3Env, NimEnv, PongEnv
from sb3_r2po.envs.maze import MAZE_WALLS, MOVES

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


@pytest.mark.parametrize("y0, dy", [(3.0, -5.0), (587.0, 5.0)])
def test_pong_wall_bounce(y0, dy):
    """At or beyond a wall (y <= 0 or y >= 590) dy changes sign; the position is not corrected (envs/pong.py)."""
    env = PongEnv()
    env.reset(seed=0)
    env.ball[:] = (400.0, y0)
    env.velocity[:] = (5.0, dy)
    obs, reward, terminated, *_ = env.step(2)
    assert obs[2] == y0 + dy and obs[4] == -dy
    assert reward == 0.0 and not terminated
    obs, *_ = env.step(2)
    assert obs[2] == y0 and obs[4] == -dy


def test_pong_no_hit_test_before_the_paddle_line():
    env = PongEnv()
    env.reset(seed=0)
    env.ball[:] = (20.0, 300.0)
    env.velocity[:] = (-5.0, 0.0)
    obs, reward, terminated, _, info = env.step(2)  # x = 15 > 10: not yet at the paddle
    assert obs[1] == 15.0 and obs[3] == -5.0 and reward == 0.0 and not terminated and not info["returned"]


def test_pong_return_gives_reward():
    env = PongEnv()
    env.reset(seed=0)
    env.ball[:] = (15.0, 300.0)
    env.velocity[:] = (-5.0, 0.0)
    obs, reward, terminated, _, info = env.step(2)
    assert reward == 1.0 and not terminated and info["returned"] and info["missed_by"] is None
    assert obs[1] == 10.0 and obs[3] == 5.0


@pytest.mark.parametrize("ball_y, returned", [(260.0, True), (340.0, True), (259.5, False), (340.5, False)])
def test_pong_hit_window_is_the_paddle_edges_inclusive(ball_y, returned):
    env = PongEnv()
    env.reset(seed=0)  # paddle centre 300: top 260, bottom 340
    env.ball[:] = (15.0, ball_y)
    env.velocity[:] = (-5.0, 0.0)
    obs, reward, terminated, _, info = env.step(2)
    assert info["returned"] is returned and reward == float(returned) and not terminated
    assert obs[3] == (5.0 if returned else -5.0)


@pytest.mark.parametrize("ball_y, dy", [(260.0, -5.0), (280.0, -2.5), (300.0, 0.0), (320.0, 2.5), (340.0, 5.0)])
def test_pong_hit_sets_dy_from_the_hit_position(ball_y, dy):
    """dy = 5 * (2 * h - 1), h = (ball y - paddle top) / 80 (envs/pong.py, ``_handle_paddle_hit``)."""
    env = PongEnv()
    env.reset(seed=0)
    env.ball[:] = (15.0, ball_y - 3.0)
    env.velocity[:] = (-5.0, 3.0)  # the incoming dy does not matter; the ball meets the paddle at ball_y
    obs, reward, *_ = env.step(2)
    assert reward == 1.0 and obs[3] == 5.0 and obs[4] == dy
    assert obs[2] == ball_y
    obs, *_ = env.step(2)
    assert obs[2] == ball_y + dy


def test_pong_opponent_hit_sets_dy_and_gives_no_reward():
    env = PongEnv()
    env.reset(seed=0)
    env.opponent_y = 295.0  # moves first: its centre 295 < ball y 330, so it goes down to 300 (top 260)
    env.ball[:] = (775.0, 330.0)
    env.velocity[:] = (5.0, 0.0)
    obs, reward, terminated, _, info = env.step(2)
    assert env.opponent_y == 300.0
    assert obs[1] == 780.0 and obs[3] == -5.0 and obs[4] == pytest.approx(5.0 * (2 * 70.0 / 80.0 - 1))
    assert reward == 0.0 and not terminated and not info["returned"]


@pytest.mark.parametrize("x0", [10.0, 5.0, 0.0])
def test_pong_late_hit_still_counts(x0):
    """The hit is tested on every step while x <= 10, down to x = -5 (which also ends the episode)."""
    env = PongEnv()
    env.reset(seed=0)
    env.ball[:] = (x0, 300.0)
    env.velocity[:] = (-5.0, 0.0)
    obs, reward, terminated, _, info = env.step(2)
    assert reward == 1.0 and info["returned"] and obs[3] == 5.0
    assert terminated == (x0 - 5.0 < 0)
    assert info["missed_by"] == ("agent" if terminated else None)


def test_pong_paddle_catches_up_after_the_line():
    """A ball missed at x = 10 can still be hit at x = 5 or 0 if the paddle gets there."""
    env = PongEnv()
    env.reset(seed=0)
    env.ball[:] = (15.0, 345.0)  # 5 px below the paddle's bottom edge (340)
    env.velocity[:] = (-5.0, 0.0)
    _, reward, terminated, _, info = env.step(2)
    assert reward == 0.0 and not terminated and not info["returned"]
    obs, reward, terminated, _, info = env.step(1)  # paddle down 5: bottom edge 345
    assert reward == 1.0 and info["returned"] and not terminated
    assert obs[1] == 5.0 and obs[4] == 5.0


def test_pong_miss_terminates():
    env = PongEnv()
    env.reset(seed=0)
    env.ball[:] = (0.0, 500.0)
    env.velocity[:] = (-5.0, 0.0)
    obs, reward, terminated, truncated, info = env.step(2)
    assert obs[1] == -5.0 and reward == 0.0 and terminated and not truncated
    assert info["missed_by"] == "agent"


def test_pong_opponent_miss_terminates():
    env = PongEnv()
    env.reset(seed=0)
    env.opponent_y = 40.0
    env.ball[:] = (790.0, 560.0)
    env.velocity[:] = (5.0, 0.0)
    obs, reward, terminated, _, info = env.step(2)
    assert obs[1] == 795.0 and reward == 0.0 and terminated and info["missed_by"] == "opponent"


@pytest.mark.parametrize(
    "centre, ball_y, expected",
    [(300.0, 300.0, 295.0), (300.0, 300.5, 305.0), (300.0, 100.0, 295.0), (40.0, 0.0, 40.0), (560.0, 600.0, 560.0)],
)
def test_pong_opponent_bang_bang(centre, ball_y, expected):
    """The opponent always moves 5: down when its centre is above the ball's y, otherwise up; kept in the court."""
    env = PongEnv()
    env.reset(seed=0)
    env.opponent_y = centre
    env.ball[:] = (400.0, ball_y)
    env.velocity[:] = (5.0, 0.0)
    env.step(2)
    assert env.opponent_y == expected


def test_pong_serve_matches_the_reference_draws():
    """Seeded serves and a do-nothing episode equal those of the reference env (envs/pong.py) with the same seed."""
    env = PongEnv()
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs, np.array([300.0, 400.0, 300.0, 5.0, -2.3021328449249268], dtype=np.float32))
    n_steps, terminated = 0, False
    while not terminated:
        obs, reward, terminated, truncated, _ = env.step(2)
        n_steps += 1
        assert reward == 0.0 and not truncated
    assert n_steps == 233
    np.testing.assert_array_equal(obs, np.array([300.0, -5.0, 27.65673828125, -5.0, -0.6202622056007385], dtype=np.float32))
    obs, _ = env.reset(seed=1)
    np.testing.assert_array_equal(obs, np.array([300.0, 400.0, 300.0, -5.0, 4.504636764526367], dtype=np.float32))


def test_pong_serve_goes_either_way():
    velocities = np.array([PongEnv().reset(seed=seed)[0][3:] for seed in range(30)])
    assert set(velocities[:, 0]) == {-5.0, 5.0}
    assert (velocities[:, 1] < 0).any() and (velocities[:, 1] > 0).any() and (np.abs(velocities[:, 1]) <= 5.0).all()


@pytest.mark.parametrize("seed", range(5))
def test_pong_track_ball_reaches_target(seed):
    env = gym.make(PONG_ID)
    _, rewards, *_ = rollout(env, track_ball, seed)
    # Three contacts fit in 1000 steps whichever way the ball is served: the best return is exactly 3.
    assert sum(rewards) == env.spec.reward_threshold == 3.0


@pytest.mark.parametrize("seed, dx, hit_steps", [(1, -5.0, [78, 386, 694]), (0, 5.0, [230, 538, 846])])
def test_pong_perfect_tracker_scores_three(seed, dx, hit_steps):
    """A paddle that follows the ball scores exactly 3 in 1000 steps, hitting where the reference env does."""
    env = gym.make(PONG_ID)
    obs, _ = env.reset(seed=seed)
    assert obs[3] == dx
    hits = []
    for step in range(1, 1001):
        obs, reward, terminated, truncated, _ = env.step(0 if obs[0] > obs[2] else 1)
        if reward:
            hits.append(step)
        if terminated or truncated:
            break
    assert hits == hit_steps
    assert step == 1000 and truncated and not terminated


def test_pong_truncates_itself_after_1000_steps():
    """Like the reference env, PongEnv truncates at 1000 steps without gymnasium's TimeLimit."""
    env = PongEnv()
    obs, _ = env.reset(seed=1)
    for step in range(1, 1001):
        obs, _, terminated, truncated, _ = env.step(track_ball(obs))
        assert not terminated
        assert truncated == (step == 1000)


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
    assert _bfs_over_env() == [1, 1, 2, 2]  # S, S, E, E: the Manhattan distance


def _bfs_over_env() -> list[int]:
    """Breadth-first search over action sequences, each replayed on a fresh registered env."""
    frontier: list[list[int]] = [[]]
    seen = {0}
    while frontier:
        next_frontier = []
        for path in frontier:
            for action in range(4):
                env = gym.make(MAZE_ID)
                obs, _ = env.reset(seed=0)
                for a in [*path, action]:
                    obs, _, terminated, _, _ = env.step(a)
                if terminated:
                    return [*path, action]
                if int(obs) not in seen:
                    seen.add(int(obs))
                    next_frontier.append([*path, action])
        frontier = next_frontier
    raise AssertionError("the goal is unreachable")


def test_maze_optimal_return_is_the_papers():
    """The reference's maze (maze2d_3x3.npy): 4-step shortest path, optimal return 1 - 3 * 0.1 / 9 = 0.967 (paper: 0.97)."""
    path = _bfs_over_env()
    assert len(path) == 4
    assert path == [1, 1, 2, 2]  # the only shortest path: S, S, E, E

    # The optimal tabular policy (params[0] = params[3] = 1, params[6] = params[7] = 2) earns it in every episode.
    table = [1, 0, 0, 1, 0, 0, 2, 2, 0]
    env = gym.make(MAZE_ID)
    observations, rewards, terminated, _ = rollout(env, lambda obs: table[int(obs)], seed=0)
    assert [int(o) for o in observations] == [0, 3, 6, 7, 8]
    assert terminated and len(rewards) == 4
    assert sum(rewards) == pytest.approx(1.0 - 3 * 0.1 / 9)
    assert round(sum(rewards), 3) == 0.967
    assert sum(rewards) >= env.spec.reward_threshold


# The reference's layout file maze2d_3x3.npy, indexed cells[x, y]; bit 1 opens north, 2 east, 4 south, 8 west.
REFERENCE_CELLS = [[2, 1, 1], [2, 2, 8], [4, 8, 8]]


def test_maze_walls_are_the_reference_layout():
    """Our walls are exactly the closed boundaries decoded from the reference's cell codes (maze_view_2d.py)."""
    bits = {0: 1, 1: 4, 2: 2, 3: 8}  # action -> the bit that opens that side
    opposite = {0: 1, 1: 0, 2: 3, 3: 2}
    walls = set()
    for x in range(3):
        for y in range(3):
            for action, (dx, dy) in MOVES.items():
                nx, ny = x + dx, y + dy
                if not (0 <= nx < 3 and 0 <= ny < 3):
                    continue
                is_open = REFERENCE_CELLS[x][y] & bits[action] or REFERENCE_CELLS[nx][ny] & bits[opposite[action]]
                if not is_open:
                    walls.add(frozenset({(x, y), (nx, ny)}))
                # Our env agrees on every move.
                assert Maze3x3Env.next_cell((x, y), action) == ((nx, ny) if is_open else (x, y))
    assert walls == set(MAZE_WALLS)
    assert len(walls) == 4


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
    obs, reward, *_ = env.step(2)  # east from the start: free
    assert obs == 1 and reward == pytest.approx(-0.1 / 9)
    obs, reward, terminated, truncated, info = env.step(1)  # south from (1, 0): wall
    assert obs == 1 and info["blocked"]
    assert reward == pytest.approx(-0.1 / 9)
    assert not terminated and not truncated


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
