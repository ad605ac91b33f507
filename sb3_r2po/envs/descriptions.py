"""
Task descriptions of the ten R2PO environments, registered on import.

Each description was checked against the environment's code (gymnasium 1.x for the built-in ones,
:mod:`sb3_r2po.envs` for the custom ones): one line per observation dimension (``Box``) or one line
for the state index (``Discrete``), one line per discrete action or per action dimension. The
parameter layout of the policy is rendered by the algorithm, not written here.
"""

from __future__ import annotations

from sb3_r2po.prompts.tasks import TaskDescription, register_task_description

CARTPOLE = TaskDescription(
    summary=(
        "Balance a pole hinged on top of a cart that runs along a horizontal track, by pushing the cart left or "
        "right, for as long as possible. Every episode starts with all four state values drawn uniformly from "
        "[-0.05, 0.05]."
    ),
    observations=(
        "s[0]: cart position on the track in metres, 0 is the centre, positive to the right; "
        "the episode fails once |s[0]| > 2.4 (observed range [-4.8, 4.8])",
        "s[1]: cart velocity in m/s, positive to the right; unbounded, typically within [-2.5, 2.5]",
        "s[2]: pole angle from vertical in radians, positive when the pole leans to the right; "
        "the episode fails once |s[2]| > 0.2095 (12 degrees) (observed range [-0.418, 0.418])",
        "s[3]: pole angular velocity in rad/s, positive when the pole is falling to the right; unbounded, "
        "typically within [-3, 3]",
    ),
    actions=(
        "0: push the cart to the left with a fixed force of 10 N",
        "1: push the cart to the right with a fixed force of 10 N",
    ),
    reward="+1 for every step taken, including the last one; the return is the number of steps survived",
    episode_end=(
        "terminates when the pole angle exceeds 0.2095 rad (12 degrees) either way or the cart position "
        "leaves [-2.4, 2.4]; truncated after 500 steps"
    ),
)

INVERTED_PENDULUM = TaskDescription(
    summary=(
        "MuJoCo cart-pole: keep a pole hinged on a cart upright by applying a continuous horizontal force to the "
        "cart, which slides on a rail. Episodes start near the upright rest state (each position and velocity "
        "perturbed uniformly by up to 0.01)."
    ),
    observations=(
        "s[0]: cart position along the rail in metres, 0 is the centre, positive in the direction a positive "
        "force pushes; the rail limits it to about [-1, 1]",
        "s[1]: pole angle from vertical in radians, positive when the pole leans towards positive cart positions; "
        "the episode ends once |s[1]| > 0.2",
        "s[2]: cart velocity in m/s, positive towards positive positions; unbounded",
        "s[3]: pole angular velocity in rad/s, positive when the pole angle is increasing; unbounded",
    ),
    actions=(
        "a[0]: force on the cart, continuous in [-3, 3]; positive accelerates the cart towards positive "
        "positions, which tips the pole towards negative angles",
    ),
    reward="+1 for every step on which the pole is still upright (|angle| <= 0.2 rad), 0 on the step it falls",
    episode_end="terminates when |pole angle| > 0.2 rad (or the state stops being finite); truncated after 1000 steps",
)

INVERTED_DOUBLE_PENDULUM = TaskDescription(
    summary=(
        "MuJoCo double pendulum on a cart: two poles are hinged in a chain on top of a cart that slides on a rail; "
        "keep both upright, with the free tip high and near the centre, by applying a continuous force to the cart. "
        "Episodes start near upright (positions perturbed uniformly by up to 0.1, velocities with Gaussian noise of "
        "scale 0.1)."
    ),
    observations=(
        "s[0]: cart position along the rail in metres, 0 is the centre, positive in the direction a positive "
        "force pushes; the rail limits it to about [-1, 1]",
        "s[1]: sine of the first pole's angle from vertical, in [-1, 1]; positive when it leans towards positive "
        "cart positions",
        "s[2]: sine of the second pole's angle relative to the first pole, in [-1, 1]; positive when it bends "
        "towards positive cart positions",
        "s[3]: cosine of the first pole's angle from vertical, in [-1, 1]; 1 when upright",
        "s[4]: cosine of the second pole's angle relative to the first pole, in [-1, 1]; 1 when aligned with it",
        "s[5]: cart velocity in m/s, clipped to [-10, 10]",
        "s[6]: angular velocity of the first pole in rad/s, clipped to [-10, 10]",
        "s[7]: angular velocity of the second pole relative to the first in rad/s, clipped to [-10, 10]",
        "s[8]: constraint force on the cart along the rail, clipped to [-10, 10]; 0 except when the cart presses "
        "against an end of the rail",
    ),
    actions=("a[0]: force on the cart, continuous in [-1, 1]; positive accelerates the cart towards positive positions",),
    reward=(
        "per step: 10 while the tip of the second pole is higher than 1 m (0 on the step it drops), minus "
        "0.01 * x_tip^2 + (height_tip - 2)^2 (horizontal offset and height of the free tip; fully upright the tip "
        "is at 1.2 m, a penalty of about 0.64), minus 0.001 * w1^2 + 0.005 * w2^2 (w1, w2 the two hinge angular "
        "velocities); about 9.3 per step when balanced and still"
    ),
    episode_end="terminates when the tip of the second pole drops to a height of 1 m or less; truncated after 1000 steps",
)

MOUNTAIN_CAR = TaskDescription(
    summary=(
        "A car sits in a valley between two hills and must reach the flag on top of the right hill. Its engine is "
        "too weak to drive straight up, so it has to rock back and forth to build momentum. Episodes start at rest "
        "at a position drawn uniformly from [-0.6, -0.4]."
    ),
    observations=(
        "s[0]: car position along the x-axis, in [-1.2, 0.6]; the valley bottom is near -0.52, the goal is at 0.5 "
        "on the right hill, and -1.2 is a wall on the left hill (hitting it stops the car)",
        "s[1]: car velocity, in [-0.07, 0.07], positive to the right",
    ),
    actions=(
        "0: accelerate to the left",
        "1: do not accelerate",
        "2: accelerate to the right",
    ),
    reward=(
        "-1 for every step until the goal is reached; the return is minus the number of steps taken "
        "(velocity changes by (action - 1) * 0.001 - 0.0025 * cos(3 * position) per step)"
    ),
    episode_end="terminates when the position reaches 0.5; truncated after 200 steps",
)

MOUNTAIN_CAR_CONTINUOUS = TaskDescription(
    summary=(
        "A car sits in a valley between two hills and must reach the flag on top of the right hill using a "
        "continuous engine force. The engine is too weak to drive straight up, so the car has to rock back and "
        "forth to build momentum. Episodes start at rest at a position drawn uniformly from [-0.6, -0.4]."
    ),
    observations=(
        "s[0]: car position along the x-axis, in [-1.2, 0.6]; the valley bottom is near -0.52, the goal is at "
        "0.45 on the right hill, and -1.2 is a wall on the left hill (hitting it stops the car)",
        "s[1]: car velocity, in [-0.07, 0.07], positive to the right",
    ),
    actions=(
        "a[0]: engine force, continuous in [-1, 1] (positive pushes right); velocity changes by "
        "0.0015 * force - 0.0025 * cos(3 * position) per step",
    ),
    reward="-0.1 * a[0]^2 on every step (an energy cost), plus 100 on the step the car reaches the goal",
    episode_end="terminates when the position reaches 0.45; truncated after 999 steps",
)

SWIMMER = TaskDescription(
    summary=(
        "MuJoCo swimmer: a three-segment snake-like body in a viscous 2D pool, with two rotor joints linking the "
        "front, middle and back segments; swim forward (towards +x) as fast as possible by applying torques at the "
        "rotors. Episodes start near a straight pose at rest (each position and velocity perturbed uniformly by "
        "up to 0.1)."
    ),
    observations=(
        "s[0]: orientation angle of the front segment in the plane, in radians; unbounded (0 means facing +x)",
        "s[1]: angle of the first rotor (front-middle joint) in radians, limited to about [-1.75, 1.75]",
        "s[2]: angle of the second rotor (middle-back joint) in radians, limited to about [-1.75, 1.75]",
        "s[3]: velocity of the front segment along x (the rewarded forward direction) in m/s",
        "s[4]: velocity of the front segment along y (sideways) in m/s",
        "s[5]: angular velocity of the front segment's orientation in rad/s",
        "s[6]: angular velocity of the first rotor in rad/s",
        "s[7]: angular velocity of the second rotor in rad/s",
    ),
    actions=(
        "a[0]: torque on the first rotor (front-middle joint), continuous in [-1, 1]",
        "a[1]: torque on the second rotor (middle-back joint), continuous in [-1, 1]",
    ),
    reward=(
        "per step: the forward velocity of the front segment along x (its x displacement over the step divided by "
        "the step time 0.04 s) minus 0.0001 * (a[0]^2 + a[1]^2)"
    ),
    episode_end="never terminates; truncated after 1000 steps",
)

PONG = TaskDescription(
    summary=(
        "Single-player Pong on an 800 x 600 pixel court: you control the left paddle (80 pixels tall, moving 5 "
        "pixels per step) against a right paddle that follows the ball. Keep returning the ball. The ball starts "
        "at the centre (400, 300), moves 5 pixels per step horizontally, with a random serve direction and a "
        "random vertical speed in [-5, 5]; it bounces off the top and bottom walls, and a paddle hit reverses "
        "only its horizontal direction."
    ),
    observations=(
        "s[0]: y of the centre of your paddle in pixels, in [40, 560] (y grows downwards, 0 is the top wall)",
        "s[1]: ball x in pixels, in [0, 800]; your paddle is at the left edge, the ball reaches it at x = 15",
        "s[2]: ball y in pixels, in [0, 600] (y grows downwards)",
        "s[3]: ball horizontal velocity in pixels per step, -5 (moving towards you) or +5 (moving away)",
        "s[4]: ball vertical velocity in pixels per step, in [-5, 5], positive moving down",
    ),
    actions=(
        "0: move your paddle up (towards y = 0) by 5 pixels",
        "1: move your paddle down (towards y = 600) by 5 pixels",
        "2: keep your paddle still",
    ),
    reward=(
        "+1 each time your paddle returns the ball (when the ball reaches x = 15 with its y within 45 pixels of your "
        "paddle's centre), 0 otherwise"
    ),
    episode_end=(
        "terminates as soon as the ball gets past a paddle (in practice your paddle, since the opponent keeps up "
        "with the ball); truncated after 1000 steps"
    ),
)

FROZEN_LAKE = TaskDescription(
    summary=(
        "Walk across a slippery frozen lake on the 4x4 grid SFFF / FHFH / FFFH / HFFG (S start at the top-left, "
        "F frozen, H hole, G goal at the bottom-right) without falling into a hole. The ice is slippery: the "
        "chosen direction is taken with probability 1/3, and each of the two perpendicular directions with "
        "probability 1/3; a move off the grid leaves you in place."
    ),
    observations=(
        "the state is the cell index row * 4 + column in 0..15 (row 0 at the top); start 0, holes 5, 7, 11 and 12, goal 15",
    ),
    actions=(
        "0: move left (column - 1)",
        "1: move down (row + 1)",
        "2: move right (column + 1)",
        "3: move up (row - 1)",
    ),
    reward="+1 on reaching the goal, 0 on every other step (falling into a hole also gives 0)",
    episode_end="terminates on reaching the goal or falling into a hole; truncated after 100 steps",
)

MAZE_3X3 = TaskDescription(
    summary=(
        "Find the way through a fixed 3x3 grid maze from the top-left cell (x=0, y=0) to the bottom-right cell "
        "(x=2, y=2). Internal walls block the moves between (0,0) and (0,1), between (1,0) and (1,1), and between "
        "(2,1) and (2,2); a move into a wall or off the grid leaves you in place. Moves are deterministic."
    ),
    observations=(
        "the state is the cell index y * 3 + x in 0..8, x the column (0 west .. 2 east), y the row (0 north .. "
        "2 south); start 0, goal 8",
    ),
    actions=(
        "0: move north (y - 1)",
        "1: move south (y + 1)",
        "2: move east (x + 1)",
        "3: move west (x - 1)",
    ),
    reward="+1 on the step that reaches the goal, -0.1/9 (about -0.0111) on every other step, including blocked moves",
    episode_end="terminates on reaching the goal; truncated after 20 steps",
)

NIM = TaskDescription(
    summary=(
        "Misère Nim against an optimal opponent: a pile starts with 10 sticks, you move first, players alternately "
        "remove 1, 2 or 3 sticks, and whoever takes the last stick loses. After each of your moves the opponent "
        "replies at once, leaving a multiple of 4 plus 1 sticks when it can and otherwise taking a random legal "
        "number."
    ),
    observations=("the state is the number of sticks remaining on your turn, in 0..10 (0 only after the game ends)",),
    actions=(
        "0: remove 1 stick",
        "1: remove 2 sticks",
        "2: remove 3 sticks",
    ),
    reward=(
        "+1 if the opponent is forced to take the last stick, -1 if you take the last stick, -1 for trying to "
        "remove more sticks than remain; 0 otherwise"
    ),
    episode_end="terminates when the last stick is taken or after an illegal move (which loses immediately)",
)

DESCRIPTIONS: dict[str, TaskDescription] = {
    "CartPole-v1": CARTPOLE,
    "InvertedPendulum-v5": INVERTED_PENDULUM,
    "InvertedDoublePendulum-v5": INVERTED_DOUBLE_PENDULUM,
    "MountainCar-v0": MOUNTAIN_CAR,
    "MountainCarContinuous-v0": MOUNTAIN_CAR_CONTINUOUS,
    "Swimmer-v5": SWIMMER,
    "R2PO/Pong-v0": PONG,
    "FrozenLake-v1": FROZEN_LAKE,
    "R2PO/Maze3x3-v0": MAZE_3X3,
    "R2PO/Nim-v0": NIM,
}
"""The ten environments' descriptions by gymnasium id."""

for _env_id, _description in DESCRIPTIONS.items():
    register_task_description(_env_id, _description)
