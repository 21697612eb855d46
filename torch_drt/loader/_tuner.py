"""HillClimb: the search behind ``num_workers="auto"`` / ``prefetch_depth="auto"``, free of any loader.

It proposes a ``Setting`` (workers, batches ahead), is told what the last trial measured (``Trial``) and proposes
the next, until it settles. Workers first: times ``WORKER_STEP`` while throughput rises by ``WORKER_GAIN`` and the
caller still waits for data, then one step between the best and the first that did not pay (their geometric mean);
then batches ahead, doubled while throughput rises by ``DEPTH_GAIN``. Thread workers start at ``THREAD_START`` (a
thread costs no start) and steps of 4 reach 16 in two trials (4, 16), where doubling takes three: the search for an
I/O-bound loader fits in the first 5% of an epoch of 1,280 batches, and each step's gain stands out of the noise
more. Process workers start at 1 and double (``PROCESS_STEP``):
they are CPU-bound, their best is near the machine's CPUs, and steps of 4 skip it (1, 4, 16 never tries 2 on a
2-CPU machine, where 4 processes still beat 1). When batches ahead are searched too, a number of process workers is
tried with ``PROCESS_AHEAD`` batches ahead per worker (1x1, 2x2, 4x4): they take batches in round robin, and a batch is
requested when the one ``in_flight`` before it is delivered, so with fewer batches ahead than workers a worker that
finishes its batch has none queued and waits for the hand-off of another worker's (2x2 ran 20-35% faster than 2x1
on 2 CPUs, and the 64-batch budget ran out before a trial of batches ahead); no depth trial follows (2x3 did no
better than 2x2, and its larger transport rings fork the processes again, and once more for the return). Every
setting it proposes after the first trial fits the memory cap: its ``MemoryModel`` estimate (per-worker memory and
per-batch bytes, as measured) is at most the cap.

The search's budget bounds it too: a trial the batches left cannot finish (``trial_batches``) is not started. A step
up of the workers that does not fit is made smaller (doubling) when that one fits, else the search ends at the best
measured (a trial cut short by the budget measures nothing). An I/O-bound loader on thread workers thus climbs 4,
16, 32 within 64 batches (the first 5% of an epoch of 1,280) where 4, 16, 64 ran out of budget at 16.

Like is compared with like: a number of workers that did not pay while the caller waited is judged again against
the best measured anew, right after it (once per best setting). The two trials then both start from workers
started afresh, under the same load, where the best's first trial may have run under other conditions (the first
trial of an epoch starts from workers that read ahead while the loader started; the machine's load drifts): one
trial measured high, or low, does not end the search for workers.

A trial measures a setting's steady throughput by Little's law (``TrialClock``): the batches in flight divided
by the mean time a measured batch spent in flight, from its request to its delivery. The loader keeps ``in_flight``
batches requested: a new setting's first round is requested when it starts, each later batch when the one
``in_flight`` before it is delivered. Each measured batch counts its whole time in flight, so none counts as free: a
rate from the first batch's arrival on counted the rest of the first round, which in-order delivery holds back and
hands over with it, as taking no time (1.5 times the steady rate of 4 or 16 threads on batches of unequal cost). A
trial's warm-up (``trial_batches``) is its first round where that round carries a start: process workers' (each
one's first batch), or the loader's (a new iterator: the first trial of an epoch). Thread workers changed mid-epoch
start at once and have none, which keeps the thread search's 4, 16, 32 within 64 batches (13 + 17 + 33).
"""

from __future__ import annotations

import collections
import dataclasses
import math

WORKER_STEP = 4  # thread workers: I/O-bound loaders want many
PROCESS_STEP = 2  # process workers: CPU-bound, the best is near the CPUs, and each one costs memory and a start
PROCESS_AHEAD = 1  # process workers: batches ahead per worker while workers are searched (one queued behind each)
WORKER_GAIN = 1.10  # more workers stay only for 10% more throughput (noise and memory are not free)
DEPTH_GAIN = 1.05
MIN_TRIAL = 8
MIN_BUDGET = 64  # the fewest batches a search may use (an epoch of unknown length: this many)
PLANNED_TRIALS = 8  # a search's usual trials: 4, 16, 64 threads, a best measured again, a step between, 3 depths
THREAD_START = WORKER_STEP  # thread workers start here: a thread costs no start, and one is rarely the best
CONSUMER_BOUND = 0.10  # the caller waited less than this share of the time: more loading cannot help it


@dataclasses.dataclass(frozen=True, order=True)
class Setting:
    """Workers and batches loaded ahead beyond them (``in_flight = workers + depth``)."""

    workers: int
    depth: int


@dataclasses.dataclass(frozen=True)
class Trial:
    """What a setting's trial measured: batches per second delivered to the caller, the share of its time the
    caller waited for data, and the memory seen (bytes of the largest batch, private bytes per worker)."""

    throughput: float
    wait_share: float
    batch_bytes: int = 0
    worker_bytes: int = 0


@dataclasses.dataclass
class MemoryModel:
    """The memory a setting holds, estimated: ``workers * worker_bytes + (workers + depth + extra) * batch_bytes``
    (``extra``: a process worker's transport keeps two more batches per worker); compared with ``cap`` bytes."""

    cap: int
    processes: bool = False
    batch_bytes: int = 0
    worker_bytes: int = 0

    def estimate(self, setting: Setting) -> int:
        """Bytes ``setting`` holds by this model."""
        batches = setting.workers + setting.depth + (2 * setting.workers if self.processes else 0)
        return setting.workers * self.worker_bytes + batches * self.batch_bytes

    def fits(self, setting: Setting) -> bool:
        """Whether ``setting``'s estimate is within the cap."""
        return self.estimate(setting) <= self.cap

    def learn(self, trial: Trial) -> None:
        """Keep the largest batch and worker seen."""
        self.batch_bytes = max(self.batch_bytes, trial.batch_bytes)
        self.worker_bytes = max(self.worker_bytes, trial.worker_bytes)


class TrialClock:
    """A trial of ``setting``, counted and timed: ``warmup`` batches, then ``length`` measured by Little's law (see
    the module docstring); its pipeline's first round was requested at ``start_ns``. ``budget``, ``threads``,
    ``started``: as ``trial_batches`` takes them.

    Attributes:
        warmup, length: the batches not measured (the first ``warmup`` delivered), then the batches to measure.
        count, measured: the batches delivered so far, and measured.
        spent_ns: the measured batches' time in flight, summed.
    """

    def __init__(self, setting: Setting, start_ns: int, budget: int | None = None, threads: bool = False,
                 started: bool = False) -> None:
        self.in_flight = setting.workers + setting.depth
        self.warmup, self.length = trial_batches(setting, budget, threads, started)
        self.count = self.measured = self.spent_ns = 0
        self._requested = collections.deque([start_ns] * self.in_flight)  # of the next batches, in order

    def restart(self, start_ns: int) -> None:
        """The pipeline started afresh at ``start_ns`` (a new epoch) within the trial: its first round carries the
        start and is not measured; the batches measured so far still count."""
        self.warmup = self.count + self.in_flight
        self._requested = collections.deque([start_ns] * self.in_flight)

    def delivered(self, now_ns: int) -> None:
        """A batch was delivered at ``now_ns`` (the batch ``in_flight`` after it is requested then)."""
        self.count += 1
        requested = self._requested.popleft()
        self._requested.append(now_ns)
        if self.count > self.warmup:
            self.spent_ns += now_ns - requested
            self.measured += 1

    @property
    def ends(self) -> bool:
        """Whether the trial's last batch was delivered."""
        return self.measured == self.length

    @property
    def elapsed_ns(self) -> int:
        """The measured batches' time at the steady rate measured (``length / elapsed_ns`` is that rate)."""
        return max(1, self.spent_ns // self.in_flight)


class HillClimb:
    """Proposes settings from trials (see the module docstring).

    Args:
        start: the first setting (its ``workers`` kept when ``tune_workers`` is false, its ``depth`` likewise),
            shrunk to fit the cap when ``memory`` already knows its bytes (a search resumed from a checkpoint).
        memory: the memory model and cap.
        max_workers: the most workers to try.
        max_depth: the most batches ahead to try.
        tune_workers, tune_depth: which of the two to search.
        budget: the search's batches (None: no end), which its trials must fit (``observe``'s ``left``).

    Attributes:
        current: the setting to run now.
        best: the best setting measured so far (``current`` once ``done``).
        done: whether the search settled.
    """

    def __init__(self, start: Setting, memory: MemoryModel, max_workers: int, max_depth: int = 16,
                 tune_workers: bool = True, tune_depth: bool = True, budget: int | None = None) -> None:
        self.memory, self.max_workers, self.max_depth, self.budget = memory, max_workers, max_depth, budget
        self._tune_workers, self._tune_depth = tune_workers, tune_depth
        self.current = self.best = self._fit(start)
        self._best_rate = 0.0
        self._phase = "workers" if tune_workers else "depth" if tune_depth else "done"
        self._failed: int | None = None  # the fewest workers measured not to pay
        self._refined = False
        self._rechecked: set[Setting] = set()  # best settings measured again against a challenger
        self._challenger: tuple[Setting, Trial] | None = None  # judged again once the best is measured anew
        self.done = self._phase == "done"
        self.history: list[tuple[Setting, Trial]] = []
        self._left: int | None = None

    def observe(self, trial: Trial, left: int | None = None) -> Setting:
        """The trial of ``current`` ended: the next setting to run (``best`` once the search settles); ``left``:
        the batches left in the budget (None: no end), which the next trial must fit."""
        self._left = left
        self.memory.learn(trial)
        self.history.append((self.current, trial))
        if self._challenger is not None:  # ``trial`` measured the best anew: the challenger is judged against it
            self._best_rate = trial.throughput
            (self.current, trial), self._challenger = self._challenger, None
        gain = WORKER_GAIN if self._phase == "workers" else DEPTH_GAIN
        improved = trial.throughput >= self._best_rate * gain
        if not improved and self._recheck(trial) and self._affordable(self._fit(self.best)):
            self._rechecked.add(self.best)
            self.best = self._fit(self.best)  # (what was learnt of the memory may rule it out now)
            self._challenger, self.current = (self.current, trial), self.best
            return self.current
        if improved:
            self.best, self._best_rate = self.current, trial.throughput
        elif self._phase == "workers":
            self._failed = self.current.workers if self._failed is None else min(self._failed, self.current.workers)
        self.best = self._fit(self.best)  # what was learnt of the memory may rule it out now
        tried = {setting for setting, _ in self.history}
        proposal = self._next(trial, improved)
        while proposal is None or proposal in tried or not self.memory.fits(proposal) or not self._affordable(proposal):
            if self._phase == "done":
                proposal = None
                break
            proposal = self._advance()
        self.done = proposal is None
        self.current = self.best if proposal is None else proposal
        return self.current

    def _recheck(self, trial: Trial) -> bool:
        """Whether the workers of ``current``, which did not pay, are judged again against the best measured anew:
        they differ from the best's, the caller waited for data, and the best was not measured again yet."""
        return (self._phase == "workers" and self.current.workers != self.best.workers
                and trial.wait_share >= CONSUMER_BOUND and self.best not in self._rechecked)

    def settle(self) -> Setting:
        """End the search now, at the best setting measured (within the cap)."""
        self._phase, self.done = "done", True
        self.current = self.best = self._fit(self.best)
        return self.current

    def _next(self, trial: Trial, improved: bool) -> Setting | None:
        """The next proposal within the current phase (None: the phase is over)."""
        best, waits = self.best, trial.wait_share >= CONSUMER_BOUND
        if self._phase == "workers":
            if self._refined:
                return None
            if improved and waits and best.workers < self.max_workers and self._failed is None:
                step = PROCESS_STEP if self.memory.processes else WORKER_STEP
                up = self._workers(min(self.max_workers, step * best.workers))
                smaller = self._workers(min(self.max_workers, PROCESS_STEP * best.workers))
                return up if self._affordable(up) or not self._affordable(smaller) else smaller
            if self._failed is not None and self._failed - best.workers > 1:
                self._refined = True  # one step between the best and the first that did not pay
                return self._workers(round(math.sqrt(best.workers * self._failed)))
            return None
        if self._phase == "depth" and improved and waits and best.depth < self.max_depth:
            return self._fit(Setting(best.workers, min(self.max_depth, 2 * best.depth)))
        return None

    def _workers(self, workers: int) -> Setting:
        """The setting that tries ``workers`` (within the cap): the best's batches ahead, or for process workers,
        when those are searched too, ``PROCESS_AHEAD`` per worker."""
        ahead = self.best.depth
        if self.memory.processes and self._tune_depth:
            ahead = min(self.max_depth, PROCESS_AHEAD * workers)
        return self._fit(Setting(workers, ahead))

    def _advance(self) -> Setting | None:
        """Leave the current phase: the next phase's first proposal, if any (process workers were tried with their
        batches ahead: one queued behind each; more did not pay, and a trial of them forks the processes again)."""
        if self._phase == "workers" and self._tune_depth and not self.memory.processes:
            self._phase = "depth"
            return self._fit(Setting(self.best.workers, min(self.max_depth, 2 * self.best.depth)))
        self._phase = "done"
        return None

    def _affordable(self, setting: Setting) -> bool:
        """Whether a trial of ``setting`` fits the batches left in the budget (always, with no budget)."""
        if self._left is None or self.budget is None:
            return True
        return sum(trial_batches(setting, self.budget, threads=not self.memory.processes)) <= self._left

    def _fit(self, setting: Setting) -> Setting:
        """``setting``, shrunk until it fits the cap (never below one worker and one batch ahead, nor a fixed value)."""
        return setting if self.memory.fits(setting) else self._shrink(setting)

    def _shrink(self, setting: Setting) -> Setting:
        """The setting less what does not fit: batches ahead first, then workers (only those searched)."""
        workers, depth = setting.workers, setting.depth
        while not self.memory.fits(Setting(workers, depth)):
            if depth > 1 and self._tune_depth:
                depth -= 1
            elif workers > 1 and self._tune_workers:
                workers -= 1
            else:
                break
        return Setting(workers, depth)


def trial_batches(setting: Setting, budget: int | None, threads: bool = False,
                  started: bool = False) -> tuple[int, int]:
    """A trial of ``setting`` in a search of ``budget`` batches (None: an epoch of unknown length, ``MIN_BUDGET``):
    its warm-up and the batches it measures (``budget // PLANNED_TRIALS``, at least a round of the pipeline,
    ``in_flight``, and ``MIN_TRIAL``). The warm-up is a round, ``in_flight`` batches, for process workers (each
    worker's first batch carries its start) and when the loader's pipeline starts with the trial (``started``: its
    first round carries the loader's start). Thread workers (``threads``) changed mid-epoch start at once, from a
    pipeline requested anew: no warm-up, each batch's whole time in flight is measured (``TrialClock``)."""
    in_flight = setting.workers + setting.depth
    share = (MIN_BUDGET if budget is None else budget) // PLANNED_TRIALS
    return 0 if threads and not started else in_flight, max(MIN_TRIAL, in_flight, share)
