"""Which NatNet frames are the server's next ones: frame order, the server's clock and the
frame rate, decided from frame numbers, server timestamps and arrival times alone (pure
Python, no sockets, no clock of its own: the caller says when a frame arrived).

A frame is handed out when its number advances, by no more than the frame rate explains
(or by as many periods as the server's own timestamps advanced: a server that skipped
frames to catch up). A repeat (the same frame through both unicast sockets, or a
reordered datagram) is dropped quietly; anything else out of sequence is rejected, until
several such frames far behind or ahead advance among themselves: a server that
restarted its numbering is then followed. Without an answer to "FrameRate" (older
servers) the rate comes from the frame timestamps, which advance by exactly one period
per frame.
"""

from __future__ import annotations

from dataclasses import dataclass

RESYNC_FRAMES = 5  # frames advancing among themselves that restart the numbering
LATE_WINDOW = 1000  # frames behind the last one that are late repeats, not a restart
MIN_FRAME_JUMP = 10  # frames a number may advance beyond what the rate explains
ASSUMED_RATE = 1000.0  # Hz, for the jump bound before the rate is known
RATE_FRAMES = 10  # frames between the two timestamps the rate is estimated from


@dataclass(frozen=True)
class Placement:
    """What the sequencer makes of one frame: ``accepted`` frames are handed out;
    ``rejected`` is (kind, what) for bad input to report, also on an accepted frame
    (the first frame of a restarted numbering)."""

    accepted: bool
    rejected: tuple[str, str] | None = None


_ACCEPTED = Placement(True)
_DROPPED = Placement(False)


class FrameSequencer:
    """The order of one server's frames. ``rate`` is the server's frame rate in Hz (0
    while unknown); ``duplicates`` counts frames received twice."""

    def __init__(self) -> None:
        self.rate = 0.0
        self.duplicates = 0
        self.last_number: int | None = None  # frame number of the last frame handed out
        self._last_arrival = 0.0
        self._last_timestamp = 0.0
        self._resync: list[int] = []  # frame numbers out of sequence that advance among themselves
        self._rate_reference: tuple[int, float] | None = None

    def restart(self) -> None:
        """Forget the numbering (a server silent long enough to have restarted numbers its
        frames anew); the next frames start it again."""
        self.last_number = None

    def place(self, number: int, timestamp: float, arrival: float) -> Placement:
        """Place frame ``number`` with the server's ``timestamp`` (s), received at ``arrival``
        (s, monotonic)."""
        last = self.last_number
        rejected: tuple[str, str] | None = None
        if last is None:
            # the first frames of a connection: nothing to compare with, so a decodable
            # garbage frame could come first; take the numbering from frames that agree
            chain = self._resync
            if chain and chain[-1] < number <= chain[-1] + MIN_FRAME_JUMP:
                chain.append(number)
            elif not chain or number != chain[-1]:
                self._resync = chain = [number]
            if len(chain) < RESYNC_FRAMES:
                return _DROPPED
        else:
            rate = self.rate if self.rate > 0 else ASSUMED_RATE
            ahead = MIN_FRAME_JUMP + 2.0 * rate * (arrival - self._last_arrival)
            if last - LATE_WINDOW <= number <= last:
                # a repeat, or late: the same frame through the other unicast socket
                # (the two sockets are read in turns), or a reordered datagram
                self.duplicates += 1
                return _DROPPED
            if number > last + ahead and self._server_time_agrees(timestamp, number - last):
                ahead = number - last  # the server skipped frames: its clock says so too
            if not last < number <= last + ahead:
                chain = self._resync
                if chain and number == chain[-1]:
                    self.duplicates += 1
                    return _DROPPED
                if chain and chain[-1] < number <= chain[-1] + MIN_FRAME_JUMP:
                    chain.append(number)
                else:
                    self._resync = chain = [number]
                if len(chain) < RESYNC_FRAMES:
                    return Placement(
                        False,
                        (
                            "frame_out_of_sequence",
                            f"frame {number} out of sequence (last {last}): garbage or a replay",
                        ),
                    )
                rejected = (
                    "numbering_restart",
                    f"the server's frame numbers jumping (frame {number}, was "
                    f"{last}; following after {RESYNC_FRAMES} frames that agree)",
                )
        self._resync = []
        self.last_number = number
        self._last_arrival = arrival
        self._last_timestamp = timestamp
        if self.rate <= 0:
            self._estimate_rate(number, timestamp)
        return _ACCEPTED if rejected is None else Placement(True, rejected)

    def _server_time_agrees(self, timestamp: float, advance: int) -> bool:
        """A jump ahead that the server's own frame timestamps confirm (a server that
        skipped frames to catch up, or frames lost on the way): its timestamp advanced
        by the same number of periods."""
        rate = self.rate
        if rate <= 0 or advance > 60 * rate:
            return False
        expected = advance / rate
        return abs((timestamp - self._last_timestamp) - expected) <= 0.25 / rate + 1e-3 * expected

    def _estimate_rate(self, number: int, timestamp: float) -> None:
        first = self._rate_reference
        if first is None or number <= first[0] or timestamp <= first[1]:
            self._rate_reference = (number, timestamp)
        elif number - first[0] >= RATE_FRAMES:
            self.rate = (number - first[0]) / (timestamp - first[1])
