"""A compile you can watch: each compile step of a dev build read from the build's output as it
streams, objects done of the total (ninja's ``[N/M]``, or the compiler calls counted where no
total is printed), the rate, the time left; and where it fails, the failing command's own error
lines (CMake's message, the compiler's first errors), not the log's tail.

The steps are the ones docker/common/build_source.sh, build_extension.sh and build_extras.sh
run: each prints ``torchbake: building ROLE from …`` first, and BuildKit's plain progress puts
the step's number before each of its lines (``#12 45.3 [120/4810] Building CXX object …``).
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

_LINE = re.compile(r"^#(?P<step>\d+) \d+\.\d+ (?P<text>.*)$")  # a step's line in BuildKit's plain progress
_DONE = re.compile(r"^#(?P<step>\d+) DONE \d")  # a step's end in BuildKit's plain progress
_ROLE = re.compile(r"^torchbake: building (?P<role>[\w.+-]+) from ")
_NINJA = re.compile(r"^\[(?P<done>\d{1,9})/(?P<total>\d{1,9})\] ")
# a compiler called to compile one object (setuptools' -v echo, make's, ccache's)
_COMPILE = re.compile(r"^(?:\S*/)?(?:ccache )?(?:[\w.-]+-)?(?:gcc|g\+\+|cc|c\+\+|clang|clang\+\+|nvcc|hipcc|mcc)"
                      r"(?:-[\d.]+)? (?:.* )?-c ")
# what a failed configure or compile says first: CMake's message, a compiler's error, ninja's FAILED line
_ERROR = re.compile(r"CMake Error|(?:^|[\s:])(?:fatal )?error[:\s]|^FAILED: ")
RATE_WINDOW = 300.0  # seconds of objects the rate is taken over: a PyTorch compile changes pace as it goes
MOST_ERROR_LINES = 20


@dataclass
class StepProgress:
    """One compile step as far as its output went."""

    role: str
    started: float
    done: int = 0
    total: int = 0  # 0: no total printed (compiler calls counted)
    ended: float = 0.0  # when the last object was counted
    finished: float = 0.0  # when the step ended (BuildKit's DONE line)
    recent: deque = field(default_factory=deque)  # (time, done) within RATE_WINDOW
    carried: tuple[int, int] = (0, 0)  # (done, total) of the ninja runs before this one (torchvision runs several)
    run: tuple[int, int] = (0, 0)  # (done, total) of the ninja run going on

    def ninja(self, done: int, total: int, now: float) -> None:
        """ninja's ``[done/total]``: a smaller total or count than the run's starts another run."""
        if not 0 < done <= total:
            return  # [0/0], [10/5]: no count
        if total != self.run[1] or done < self.run[0]:
            self.carried = (self.carried[0] + self.run[0], self.carried[1] + self.run[1])
        self.run = (done, total)
        self.count(self.carried[0] + done, self.carried[1] + total, now)

    def count(self, done: int, total: int, now: float) -> None:
        self.done, self.total, self.ended = max(self.done, done), max(self.total, total), now
        self.recent.append((now, self.done))
        while len(self.recent) > 2 and now - self.recent[0][0] > RATE_WINDOW:
            self.recent.popleft()

    def per_minute(self) -> float:
        """Objects a minute: over the whole step once it ended; before, over the last RATE_WINDOW,
        else since the step began."""
        if self.finished:
            return 60.0 * self.done / (self.finished - self.started) if self.finished > self.started else 0.0
        if len(self.recent) >= 2 and self.recent[-1][0] > self.recent[0][0]:
            (first, done_first), (last, done_last) = self.recent[0], self.recent[-1]
            return 60.0 * (done_last - done_first) / (last - first)
        elapsed = (self.ended or self.started) - self.started
        return 60.0 * self.done / elapsed if elapsed > 0 else 0.0

    def seconds_left(self) -> float | None:
        rate = self.per_minute()
        if not self.total or not rate:
            return None
        return 60.0 * max(self.total - self.done, 0) / rate

    def describe(self) -> str:
        """"pytorch: 1,234/5,678 objects (21 %), 52 a minute, about 1 h 25 min left"."""
        if self.total:
            text = f"{self.role}: {self.done:,}/{self.total:,} objects ({100 * self.done // self.total} %)"
        else:
            text = f"{self.role}: {self.done:,} {'object' if self.done == 1 else 'objects'} compiled"
        if rate := self.per_minute():
            text += f", {rate:,.0f} a minute"
        if (left := self.seconds_left()) is not None and self.done < self.total:
            text += f", about {duration(left)} left"
        return text

    def figures(self) -> dict[str, float | int]:
        """What the build's record keeps of the step."""
        return {"objects": self.done, "total": self.total,
                "seconds": round((self.finished or self.ended or self.started) - self.started),
                "per_minute": round(self.per_minute(), 1)}


def duration(seconds: float) -> str:
    """"1 h 25 min", "12 min", "40 s"."""
    seconds = round(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 60} min" if seconds >= 60 else f"{seconds} s"


class CompileWatch:
    """Fed every line of a build's output (``torchbake.adapters.command.line_watch``): keeps each
    compile step's progress and its first error lines, and returns the progress as a line to show
    at most every ``every`` seconds while objects are being done, and a step's final figures when
    it ends ("compiled pytorch: 16/16 objects (100 %), 240 a minute"; None otherwise)."""

    def __init__(self, *, every: float = 30.0, clock: Callable[[], float] = time.monotonic,
                 live: Callable[[str], None] | None = None):
        self.every, self.clock, self.live = every, clock, live  # live: shown every change (a terminal's live line)
        self.steps: dict[str, StepProgress] = {}  # BuildKit step number → its compile step
        self.error_lines: list[str] = []
        self._said_at, self._changed, self._cmake_message = clock(), False, False

    def __call__(self, line: str) -> str | None:
        found = _LINE.match(line.rstrip("\n"))
        if found is None:
            ended = _DONE.match(line)
            if ended and (progress := self.steps.get(ended["step"])) and not progress.finished:
                progress.finished = self.clock()
                return f"compiled {progress.describe()}" if progress.done else None  # its final figures, once
            return None
        step, text, now = found["step"], found["text"], self.clock()
        if role := _ROLE.match(text):
            self.steps[step] = StepProgress(role["role"], now)
            return None
        progress = self.steps.get(step)
        if progress is None:
            return None
        if ninja := _NINJA.match(text.lstrip()):
            progress.ninja(int(ninja["done"]), int(ninja["total"]), now)
            self._changed = bool(progress.done)
        elif not progress.total and _COMPILE.match(text.lstrip()):  # (pip -v indents what setuptools runs)
            progress.count(progress.done + 1, 0, now)
            self._changed = True
        said = _ERROR.search(text) or (self._cmake_message and text.startswith("  ") and text.strip())
        self._cmake_message = bool(text.startswith("CMake Error") or (self._cmake_message and text.startswith("  ")))
        if said and len(self.error_lines) < MOST_ERROR_LINES:  # CMake's message: the indented lines after it too
            self.error_lines.append(f"{progress.role}: {text}")
        going = any(p.done and not p.finished for p in self.steps.values())
        if self.live is not None and self._changed and going:
            self.live(self.describe())
        if self._changed and now - self._said_at >= self.every and going:
            self._said_at, self._changed = now, False
            return self.describe()
        return None

    def describe(self) -> str:
        """Every compile step going on that did something, as one line: "compiling pytorch: …; vision: …"."""
        return "compiling " + "; ".join(p.describe() for p in self.steps.values() if p.done and not p.finished)

    def figures(self) -> dict[str, dict[str, float | int]]:
        """Role → the figures of its step (a role compiled twice: its last step)."""
        return {p.role: p.figures() for p in self.steps.values() if p.done}

    def errors(self) -> str:
        """The failing command's own error lines, as a block for a failure's message ("" if none)."""
        return "\n".join(f"  {line}" for line in self.error_lines)
