"""Sutton & Barto's grid mazes (Section 8.2-8.4) as Gymnasium environments.

All mazes share one description: a grid of free cells and walls, one start cell ``S`` and
one or more goal cells ``G``, written as ASCII text (``#`` wall, ``.`` free). The dynamics are
deterministic and held in a :class:`envs.tabular.TabularTable`, which the environment itself
steps, so the table the agents plan with and the environment they act in cannot disagree.

Actions (all mazes)
    0 up, 1 down, 2 right, 3 left (the order of the book's Figure 8.2).
    A move into a wall or off the grid leaves the agent where it is.
Observation
    ``Discrete(rows * cols)``: the cell index ``row * cols + col`` as a plain ``int``.
Rewards
    +1 on the step that enters a goal cell, 0 on every other step.
Termination and truncation
    ``terminated`` when a goal is reached. No step limit by default (the book has none); give
    ``max_episode_steps`` to :func:`gymnasium.make` for one. A step before the first
    ``reset`` or after a goal was reached raises :class:`envs.episode.EpisodeOverError`.
Changing mazes
    A layout may change after a number of *total* time steps, counted over the whole life of
    the environment instance, across ``reset`` calls (Figures 8.4 and 8.5). ``reset(seed=...)``
    does not rewind that clock; ``reset(options={"restart_clock": True})`` does. The clock and
    the layout in force are the attributes ``total_steps`` and ``phase``.

Version history
    v0: initial version.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from dyna.errors import ConfigError
from envs.episode import EpisodeOverError
from envs.tabular import TabularTable, table_from_P

#: (row, col) offsets of the actions up, down, right, left.
ACTION_DELTAS = ((-1, 0), (1, 0), (0, 1), (0, -1))
ACTION_NAMES = ("up", "down", "right", "left")

#: Figure 8.2 (Example 8.1): 6 x 9, start (2, 0), goal (0, 8); shortest path 14 steps.
DYNA_MAZE = """\
.......#G
..#....#.
S.#....#.
..#......
.....#...
.........
"""

#: Figure 8.4, blocking maze: the gap on the right closes and one on the left opens.
BLOCKING_MAZE_BEFORE = """\
........G
.........
.........
########.
.........
...S.....
"""
BLOCKING_MAZE_AFTER = """\
........G
.........
.........
.########
.........
...S.....
"""

#: Figure 8.5, shortcut maze: a shorter path opens on the right.
SHORTCUT_MAZE_BEFORE = BLOCKING_MAZE_AFTER
SHORTCUT_MAZE_AFTER = """\
........G
.........
.........
.#######.
.........
...S.....
"""


def parse_layout(text: str):
    """Parse an ASCII maze.

    Parameters
    ----------
    text : str
        Rows of equal length; ``#`` wall, ``.`` free, ``S`` start (exactly one), ``G`` goal
        (at least one). Blank lines and surrounding whitespace are ignored.

    Returns
    -------
    walls : bool array (rows, cols)
    start : tuple (row, col)
    goals : list of (row, col)

    Raises
    ------
    ConfigError
        Ragged rows, unknown characters, no or several starts, no goal.
    """
    if not isinstance(text, str):
        raise ConfigError("layout", text,
                          "must be a string of rows (# wall, . free, S start, G goal)")
    rows = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not rows:
        raise ConfigError("layout", text, "is empty")
    width = len(rows[0])
    if any(len(r) != width for r in rows):
        raise ConfigError("layout", text, "rows must all have the same length")
    bad = set("".join(rows)) - set("#.SG")
    if bad:
        raise ConfigError("layout", "".join(sorted(bad)), "unknown characters (use # . S G)")
    walls = np.array([[ch == "#" for ch in r] for r in rows], dtype=bool)
    starts = [(i, j) for i, r in enumerate(rows) for j, ch in enumerate(r) if ch == "S"]
    goals = [(i, j) for i, r in enumerate(rows) for j, ch in enumerate(r) if ch == "G"]
    if len(starts) != 1:
        raise ConfigError("layout", len(starts), "needs exactly one start cell S")
    if not goals:
        raise ConfigError("layout", 0, "needs at least one goal cell G")
    return walls, starts[0], goals


def scale_layout(walls: np.ndarray, start, goals, resolution: int, goal_block: bool = False):
    """Refine a maze: each cell becomes ``resolution x resolution`` cells (Example 8.4).

    Walls become wall blocks; the start becomes the top-left cell of its block. Each goal
    becomes the top-left cell of its block (default: a maze keeps as many goal cells as
    before), or with ``goal_block`` every cell of its block, as in the widely used reference
    implementation of Example 8.4 (ShangtongZhang/reinforcement-learning-an-introduction,
    ``chapter08/maze.py``: the goal of the k-refined maze is a k x k block). Shortest paths
    grow about linearly in ``resolution`` and the number of states quadratically.

    Raises
    ------
    ConfigError
        ``resolution`` not an integer >= 1, ``goal_block`` not a bool.
    """
    if isinstance(resolution, bool) or not isinstance(resolution, (int, np.integer)) \
            or resolution < 1:
        raise ConfigError("resolution", resolution, "must be an integer >= 1")
    if not isinstance(goal_block, (bool, np.bool_)):
        raise ConfigError("goal_block", goal_block, "must be true or false")
    k = int(resolution)
    walls_k = np.kron(walls, np.ones((k, k), dtype=bool)).astype(bool)
    start_k = (start[0] * k, start[1] * k)
    if goal_block:
        goals_k = [(g[0] * k + i, g[1] * k + j) for g in goals for i in range(k) for j in range(k)]
    else:
        goals_k = [(g[0] * k, g[1] * k) for g in goals]
    return walls_k, start_k, goals_k


def maze_P(walls: np.ndarray, goals) -> dict:
    """Deterministic toy-text table ``P[s][a]`` of a grid maze.

    From a goal cell every action returns ``(goal, 0, terminated=True)`` (absorbing, as in
    Gymnasium's toy-text envs). A move from any other cell, including a cell that is a wall
    in this layout (an agent can stand there when a wall appears under it in a changing maze),
    goes to the neighbouring cell unless that is a wall or off the grid.
    """
    H, W = walls.shape
    goal_set = {tuple(g) for g in goals}
    P: dict = {}
    for i in range(H):
        for j in range(W):
            s = i * W + j
            P[s] = {}
            for a, (di, dj) in enumerate(ACTION_DELTAS):
                if (i, j) in goal_set:
                    P[s][a] = [(1.0, s, 0.0, True)]
                    continue
                ni, nj = i + di, j + dj
                if not (0 <= ni < H and 0 <= nj < W) or walls[ni, nj]:
                    ni, nj = i, j
                s2 = ni * W + nj
                at_goal = (ni, nj) in goal_set
                P[s][a] = [(1.0, s2, 1.0 if at_goal else 0.0, at_goal)]
    return P


def shortest_path_length(walls: np.ndarray, start, goals) -> int:
    """Fewest steps from ``start`` to any goal by breadth-first search (-1 if unreachable)."""
    H, W = walls.shape
    goal_set = {tuple(g) for g in goals}
    dist = {tuple(start): 0}
    queue = deque([tuple(start)])
    while queue:
        i, j = queue.popleft()
        if (i, j) in goal_set:
            return dist[(i, j)]
        for di, dj in ACTION_DELTAS:
            ni, nj = i + di, j + dj
            if 0 <= ni < H and 0 <= nj < W and not walls[ni, nj] and (ni, nj) not in dist:
                dist[(ni, nj)] = dist[(i, j)] + 1
                queue.append((ni, nj))
    return -1


class GridMaze(gym.Env):
    """A deterministic grid maze whose layout may change after given total step counts.

    Parameters
    ----------
    layouts : str or sequence of str
        ASCII layouts (see :func:`parse_layout`), one per phase. All phases must have the same
        size, start and goals.
    change_at : sequence of int
        Total time steps after which phase 1, 2, ... take over (len(layouts) - 1 values,
        strictly increasing, > 0). With ``change_at=(1000,)`` steps 1..1000 use the first
        layout and step 1001 onward the second.
    resolution : int
        Each cell becomes ``resolution x resolution`` cells (:func:`scale_layout`).
    goal_block : bool
        With ``resolution`` k > 1, the goal is the whole k x k block of each goal cell
        instead of its top-left cell (:func:`scale_layout`; default False).
    render_mode : {"ansi", "rgb_array", None}

    See the module docstring for spaces, rewards and termination. The table's metadata
    also give ``free_states`` (non-wall cells, goals included: 47 k^2 for the Dyna maze;
    ``n_states`` counts every grid cell) and ``unscaled_optimal_path_length`` (the
    shortest path of the first layout before refinement; 14 for the Dyna maze).
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(self, layouts: str | Sequence[str] = DYNA_MAZE, change_at: Sequence[int] = (),
                 resolution: int = 1, render_mode: str | None = None, goal_block: bool = False):
        if isinstance(layouts, str):
            layouts = [layouts]
        if not isinstance(layouts, (list, tuple)) or not layouts:
            raise ConfigError("layout", layouts,
                              "must be a string of rows (# wall, . free, S start, G goal)")
        layouts = list(layouts)
        from dyna.errors import check_range

        import numbers

        if change_at is None or isinstance(change_at, (numbers.Number, str)):
            change_at = [change_at]
        change_at = [check_range("change_at", c, 1, 2**62, integer=True) for c in change_at]
        if len(change_at) != len(layouts) - 1:
            raise ConfigError("change_at", change_at,
                              f"needs {len(layouts) - 1} value(s), one per layout change")
        if any(c <= 0 for c in change_at) or any(b <= a for a, b in zip(change_at, change_at[1:])):
            raise ConfigError("change_at", change_at, "must be positive and strictly increasing")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError("render_mode", render_mode, "must be 'ansi', 'rgb_array' or None")
        parsed = [scale_layout(*parse_layout(t), resolution, goal_block) for t in layouts]
        unscaled = shortest_path_length(*parse_layout(layouts[0]))
        walls0, start, goals = parsed[0]
        for w, st, g in parsed[1:]:
            if w.shape != walls0.shape or st != start or g != goals:
                raise ConfigError("layouts", "...",
                                  "all phases need the same size, start and goals")
        self.walls_by_phase = [p[0] for p in parsed]
        self.start, self.goals = start, goals
        self.rows, self.cols = walls0.shape
        self.resolution = int(resolution)
        n = self.rows * self.cols
        isd = np.zeros(n)
        isd[start[0] * self.cols + start[1]] = 1.0
        self.optimal_path_lengths = [shortest_path_length(w, start, goals)
                                     for w in self.walls_by_phase]
        if -1 in self.optimal_path_lengths:
            phase = self.optimal_path_lengths.index(-1)
            raise ConfigError("layout", layouts[phase], "no goal can be reached from the start")
        self.table: TabularTable = table_from_P(
            [maze_P(w, goals) for w in self.walls_by_phase], isd,
            phase_start=[0] + change_at,
            meta={"optimal_path_length": self.optimal_path_lengths[0],
                  "optimal_path_lengths": self.optimal_path_lengths,
                  "rows": self.rows, "cols": self.cols, "resolution": self.resolution,
                  "change_at": change_at, "free_states": int((~walls0).sum()),
                  "unscaled_optimal_path_length": unscaled,
                  "goal_block": bool(goal_block)})
        self.P = self.table.to_P(0)  # toy-text form of the first phase
        self.observation_space = spaces.Discrete(n)
        self.action_space = spaces.Discrete(4)
        self.render_mode = render_mode
        self.total_steps = 0
        self.s = int(start[0] * self.cols + start[1])
        self.lastaction: int | None = None
        self._running = False   # an episode is running: from reset to a goal

    @property
    def phase(self) -> int:
        """Index of the layout in force for the next step."""
        return int(self.table.phase_at(self.total_steps))

    @property
    def walls(self) -> np.ndarray:
        """bool (rows, cols): the walls in force for the next step."""
        return self.walls_by_phase[self.phase]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start an episode at the start cell. Returns ``(obs, {"prob": 1.0, ...})``."""
        super().reset(seed=seed)
        if options and options.get("restart_clock"):
            self.total_steps = 0
        self.s = int(self.start[0] * self.cols + self.start[1])
        self.lastaction = None
        self._running = True
        return self.s, {"prob": 1.0}

    def step(self, action):
        """Take one step; returns ``(obs, reward, terminated, truncated=False, info)``.

        Raises
        ------
        EpisodeOverError
            Called before reset or after a goal was reached (:mod:`envs.episode`).
        ConfigError
            An action other than 0-3.
        """
        if not self._running:
            raise EpisodeOverError(action)
        a = int(action)
        if not self.action_space.contains(a):
            raise ConfigError("action", action, "must be 0 (up), 1 (down), 2 (right) or 3 (left)")
        p = self.phase
        s2 = int(self.table.next_state[p, self.s, a, 0])
        r = float(self.table.reward[p, self.s, a, 0])
        term = bool(self.table.terminated[p, self.s, a, 0])
        self.total_steps += 1
        self.s, self.lastaction = s2, a
        self._running = not term
        return s2, r, term, False, {"prob": 1.0}

    # ------------------------------------------------------------------ rendering
    def _grid_chars(self) -> list[list[str]]:
        grid = [["#" if w else "." for w in row] for row in self.walls]
        grid[self.start[0]][self.start[1]] = "S"
        for g in self.goals:
            grid[g[0]][g[1]] = "G"
        i, j = divmod(self.s, self.cols)
        grid[i][j] = "A"
        return grid

    def render(self):
        """``ansi``: the grid as text (A agent, S start, G goal, # wall);
        ``rgb_array``: uint8 array (rows*16, cols*16, 3)."""
        if self.render_mode == "ansi":
            return "\n".join("".join(r) for r in self._grid_chars()) + "\n"
        if self.render_mode == "rgb_array":
            colours = {".": (255, 255, 255), "#": (60, 60, 60), "S": (150, 220, 150),
                       "G": (240, 200, 40), "A": (40, 90, 220)}
            grid = self._grid_chars()
            img = np.array([[colours[c] for c in row] for row in grid], dtype=np.uint8)
            return np.kron(img, np.ones((16, 16, 1), dtype=np.uint8))
        return None


class DynaMaze(GridMaze):
    """The 6 x 9 maze of Sutton & Barto Figure 8.2 (Example 8.1, Section 8.2).

    Start (2, 0), goal (0, 8), seven wall cells; the shortest path takes 14 steps.
    Registered as ``dyna/DynaMaze-v0``.
    """

    def __init__(self, render_mode: str | None = None):
        super().__init__(DYNA_MAZE, render_mode=render_mode)


class BlockingMaze(GridMaze):
    """The blocking maze of Figure 8.4 (Example 8.2, Section 8.3).

    A wall across row 3 leaves a gap on the right; after ``change_at`` total time steps
    (1000 in the book) the gap moves to the left end, blocking the learned path.
    Registered as ``dyna/BlockingMaze-v0``.
    """

    def __init__(self, change_at: int = 1000, render_mode: str | None = None):
        super().__init__([BLOCKING_MAZE_BEFORE, BLOCKING_MAZE_AFTER], change_at=change_at,
                         render_mode=render_mode)


class ShortcutMaze(GridMaze):
    """The shortcut maze of Figure 8.5 (Example 8.3, Section 8.3).

    The only path goes round the left end of the wall; after ``change_at`` total time steps
    (3000 in the book) a shorter path opens at the right end.
    Registered as ``dyna/ShortcutMaze-v0``.
    """

    def __init__(self, change_at: int = 3000, render_mode: str | None = None):
        super().__init__([SHORTCUT_MAZE_BEFORE, SHORTCUT_MAZE_AFTER], change_at=change_at,
                         render_mode=render_mode)


class AsciiMaze(GridMaze):
    """A maze from an ASCII layout, refined by ``resolution`` (Example 8.4, Section 8.4).

    With the default layout (the Dyna maze) and ``resolution`` k the maze has 54 k^2 cells,
    47 k^2 of them free; ``goal_block=True`` makes the goal the k x k block at the top right
    (shortest path 13 k + 1 steps instead of 14 k). Example 8.4 runs prioritized sweeping and
    Dyna-Q on such mazes of growing size.
    Registered as ``dyna/AsciiMaze-v0``.
    """

    def __init__(self, layout: str = DYNA_MAZE, resolution: int = 1, render_mode: str | None = None,
                 goal_block: bool = False):
        super().__init__(layout, resolution=resolution, render_mode=render_mode,
                         goal_block=goal_block)
