from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class RetryPolicy:
    """How many attempts a step frame gets, and the delay between them.

    A delay suspends the frame on a timer: the execution releases its worker while it waits.
    """

    max_attempts: int = 3
    """The number of attempts in all; 1 means no retry."""
    backoff: timedelta = timedelta(seconds=1)
    """The delay before attempt 2."""
    backoff_factor: float = 2.0
    """Multiplies the delay at each attempt."""
    max_backoff: timedelta = timedelta(minutes=5)
    """The ceiling of the delay."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"RetryPolicy.max_attempts must be at least 1, got {self.max_attempts}")
        if self.backoff < timedelta(0):
            raise ValueError(f"RetryPolicy.backoff must not be negative, got {self.backoff}")
        if self.backoff_factor < 1.0:
            raise ValueError(f"RetryPolicy.backoff_factor must be at least 1.0, got {self.backoff_factor}")
        if self.max_backoff < timedelta(0):
            raise ValueError(f"RetryPolicy.max_backoff must not be negative, got {self.max_backoff}")

    def delay_after(self, attempt: int) -> timedelta:
        """The delay between attempt ``attempt`` (which failed) and the next one."""
        seconds = self.backoff.total_seconds() * self.backoff_factor ** (attempt - 1)
        return min(timedelta(seconds=seconds), self.max_backoff)


NO_RETRY = RetryPolicy(max_attempts=1)
