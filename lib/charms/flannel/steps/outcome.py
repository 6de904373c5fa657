"""What a step did, for its handler to apply: flags to set and clear,
problems found (or cleared), what to tell the principal and the log."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..facts.status import Problem, Status


@dataclass
class Outcome:
    set_flags: list[str] = field(default_factory=list)
    clear_flags: list[str] = field(default_factory=list)
    # problem -> its text, or None: the step found it gone
    problems: dict[Problem, Optional[str]] = field(default_factory=dict)
    log: list[tuple[str, bool]] = field(default_factory=list)   # (message, warning)
    # (cidr, cni-conf-file) for the principal on the cni relation
    publish: Optional[tuple[str, str]] = None
    version: Optional[str] = None          # the application's workload version
    status: Optional[Status] = None        # set as is (the stop hook's last word)
    cos_agent: Optional[str] = None        # the `config` value for every cos-agent relation

    def set(self, *flags: str) -> "Outcome":
        self.set_flags += flags
        return self

    def clear(self, *flags: str) -> "Outcome":
        self.clear_flags += flags
        return self

    def found(self, problem: Problem, text: Optional[str]) -> "Outcome":
        self.problems[problem] = text or None
        return self

    def say(self, message: str, warning: bool = False) -> "Outcome":
        self.log.append((message, warning))
        return self


def inputs_changed(remembered: Optional[str], current: Optional[str], why: str) -> Optional[str]:
    """A step's invalidation: `why`, when what the step would act on now is
    known and differs from what it last acted on; else None."""
    return why if current is not None and remembered != current else None
