"""A user's timeline for the aggregate rate (docs/client-error.md, R9-R12): its arrivals as read, the
hold-backs that run it behind the ideal client's (R6-R8), what its shift trades at an edge (R9, R10),
what it may have brought past the run's end (R11), and the cap on first chunks there (R12)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rig.load.client_error.terms import Hold

RATE_MARGIN = 2  # R11: past the run's end a stream brings at most twice its rate as read


@dataclass(frozen=True)
class Unread:
    """R11: a stream the run's end cut, or the next one a user was about to send: what it may have
    brought past that end."""

    remaining_tokens: float  # its max_tokens less those read (inf: not known)
    first_tokens: float  # at once: its first chunk, where none had come (0: it was streaming)
    rate_per_s: float  # once streaming

    def within(self, seconds: float, first: bool = True) -> float:
        """R11: the most tokens it brings in `seconds` past the run's end: its first chunk (`first`
        False: left out), then twice its rate, never more than it had still to bring."""
        return min(self.remaining_tokens, (self.first_tokens if first else 0.0) + RATE_MARGIN * self.rate_per_s * seconds)


@dataclass(frozen=True)
class FirstChunks:
    """R12: the run's first chunks as read (every process's, sorted) and the most tokens one carried.
    At a steady state no more streams begin within a span past the run's end than twice the most that
    began within any span as long inside the run; before one (a late round of the spawn may begin all
    its streams together past the run's end), no cap."""

    times_s: np.ndarray
    first_chunk_tokens: float
    steady: bool  # a closed loop's steady window (metrics.steady_window)

    def most_within(self, seconds: float) -> float:
        if not self.steady or not len(self.times_s):  # (a steady window follows every user's first chunk)
            return math.inf
        if seconds <= 0:
            return 0.0
        begun = np.searchsorted(self.times_s, self.times_s + seconds, side="right") - np.arange(len(self.times_s))
        return RATE_MARGIN * float(begun.max()) * self.first_chunk_tokens


NO_FIRST_CHUNKS = FirstChunks(np.array([]), 1.0, False)


@dataclass(frozen=True)
class Traded:
    """R9: what a user's shift trades at an edge: tokens (those read within it, and past the run's end
    what its streams bring once begun, R11), the first chunks of streams not begun that may come past
    the run's end (apart: R12 caps them over the users), and how far past that end its span reached."""

    tokens: float
    first_tokens: float
    beyond_s: float

    @classmethod
    def of(cls, parts: list[Traded]) -> Traded:
        return cls(sum(p.tokens for p in parts), sum(p.first_tokens for p in parts), max((p.beyond_s for p in parts), default=0.0))

    def total(self, first_chunks: FirstChunks) -> float:
        return self.tokens + min(self.first_tokens, first_chunks.most_within(self.beyond_s))


NOTHING_TRADED = Traded(0.0, 0.0, 0.0)


@dataclass(frozen=True)
class Timeline:
    """One user's arrivals as read (times sorted; cumulative tokens, from 0) and its hold-backs."""

    times_s: np.ndarray
    cumulative_tokens: np.ndarray
    holds: tuple[Hold, ...]
    rate_per_s: float  # its tokens per second in the window
    unread: tuple[Unread, ...] = ()  # what it may have brought past the run's end
    traded: tuple[Traded, Traded] = (NOTHING_TRADED, NOTHING_TRADED)  # within its shift of each edge (start, end)
    scheduled: bool = False  # an arrival schedule's user: its shifts are its requests' own (R8)

    def held_by_s(self, t_s: float) -> float:
        """Its shift at t_s: the hold-backs from t_s and before."""
        return sum(hold.seconds for hold in self.holds if hold.start_s <= t_s)

    def tokens_between(self, a_s: float, b_s: float) -> float:
        return float(self.cumulative_tokens[np.searchsorted(self.times_s, b_s, side="right")]
                     - self.cumulative_tokens[np.searchsorted(self.times_s, a_s)])

    def trade(self, edge_s: float, shift_s: float, run_end_s: float, forward_s: float = 0.0) -> Traded:
        """R9-R11: its tokens read within shift_s of the edge and forward_s beyond (R10); past the
        run's end, where nothing was read, twice its mean rate in the window over that span and no
        less than what its unread streams bring then (R11), a stream not begun charged its first
        chunk apart (R12)."""
        # what never was read: arrivals within shift_s after the edge but past the run's end (an
        # estimate of arrivals, so forward_s does not widen it), or before it and read past it
        beyond_s = max(0.0, edge_s + shift_s - run_end_s) or min(shift_s, max(0.0, edge_s + shift_s + forward_s - run_end_s))
        read = self.tokens_between(edge_s - shift_s, min(edge_s + shift_s + forward_s, max(run_end_s, edge_s + shift_s)))
        if beyond_s <= 0:
            return Traded(read, 0.0, 0.0)
        rated = RATE_MARGIN * self.rate_per_s * beyond_s
        streaming = max(rated, sum(stream.within(beyond_s, first=False) for stream in self.unread))
        beginning = max(rated, sum(stream.within(beyond_s) for stream in self.unread))
        return Traded(read + streaming, beginning - streaming, beyond_s)

    def cycle_s(self, run_end_s: float) -> float:
        """The longest stretch between its first send, its requests' ends and the run's end."""
        return float(np.max(np.diff([hold.start_s for hold in self.holds] + [run_end_s])))


class Grid:
    """Points start + step * i (i < points), each moved by `lead`, as numpy computes the array
    `start + step * np.arange(points) + lead`: any point is computed alone with the very same
    roundings, so a time is placed against the points without building the array per user."""

    def __init__(self, start_s: float, step_s: float, points: int, lead_s: float = 0.0) -> None:
        self.start_s, self.step_s, self.points, self.lead_s = start_s, step_s, points, lead_s

    def at(self, index: np.ndarray) -> np.ndarray:
        point = self.start_s + self.step_s * index.astype(np.float64)
        return point + self.lead_s if self.lead_s else point

    def first_after(self, times_s: np.ndarray, seconds: np.ndarray) -> np.ndarray:
        """For each time, the first point i with point_i + its seconds > time (that float sum, as the
        array's), `points` where none: a point counts the times before it. The points grow with i, so
        a guess from the division is moved to the exact one."""
        guess = np.floor((times_s - seconds - self.lead_s - self.start_s) / self.step_s) + 1
        index = np.clip(np.nan_to_num(guess, nan=0.0, posinf=self.points, neginf=0.0), 0, self.points).astype(np.int64)
        while True:  # down while the point before still lies past the time
            down = index > 0
            down[down] = self.at(index[down] - 1) + seconds[down] > times_s[down]
            if not down.any():
                break
            index[down] -= 1
        while True:  # up while this point does not lie past it
            up = index < self.points
            up[up] = self.at(index[up]) + seconds[up] <= times_s[up]
            if not up.any():
                return index
            index[up] += 1


def tokens_in(lines: list[Timeline], grid: Grid, *spans: list[float]) -> list[np.ndarray]:
    """For each list of seconds (one per line): the tokens the lines read in [point, point + their
    seconds), for each point of the grid, summed over the lines. A line's tokens count from the first
    point that holds them: one pass over every line's tokens, not one search of the grid per line,
    and the tokens before each point are placed once for every list."""
    if not lines:
        return [np.zeros(grid.points) for _ in spans]
    times = np.concatenate([line.times_s for line in lines])
    tokens = np.concatenate([np.diff(line.cumulative_tokens) for line in lines])
    sizes = [len(line.times_s) for line in lines]

    def before(seconds: np.ndarray) -> np.ndarray:  # the tokens before each point moved by seconds
        return np.cumsum(np.bincount(grid.first_after(times, seconds), weights=tokens, minlength=grid.points + 1))[: grid.points]

    begun = before(np.zeros(len(times)))
    return [before(np.repeat(np.asarray(seconds, dtype=np.float64), sizes)) - begun for seconds in spans]
