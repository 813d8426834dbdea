"""What natnet_simulator answers to NAT_REQUEST commands, as Motive does.

``Bitstream[,version]`` (asks or changes the streamed version), ``FrameRate``,
``SetRecordTakeName``, ``StartRecording`` / ``StopRecording``, the timeline and mode
commands a live server accepts without doing anything, and the stand-in's own
``RenameRigidBody,<id>,<new name>``. A change the clients must notice (another
bitstream, renamed models) is flagged in the params bits of the next frame.
"""

from __future__ import annotations

import logging
from collections import deque

from . import protocol as nn
from .protocol import MessageId, NatNetProtocolError, Version
from .scene_stream import SceneStream

__all__ = ["MotiveCommands"]

log = logging.getLogger("natnet_simulator")

#: an anchor-marker description's contents: opaque (the layout is not public)
ANCHOR_MARKER_BYTES = b"anchor1\0" + bytes(range(24))
#: the "future Motive"'s description: a type no known version has, opaque contents
FUTURE_DESCRIPTION_TYPE = 99
FUTURE_DESCRIPTION_BYTES = b"future description\0" + bytes(13)


class MotiveCommands:
    """The command answers and the state they change: version, take name, recording."""

    def __init__(self, stream: SceneStream, version: Version, rate: float, future: bool = False) -> None:
        self.stream = stream
        self.version = version  # the server's own bitstream (streamed multicast)
        self.rate = rate
        self.future = future  # a "future Motive": an unknown description type in the models
        self.pending_params = 0  # FRAME_* bits for the next frame
        self.take_name = ""  # SetRecordTakeName
        self.recording = False  # StartRecording / StopRecording
        self.recordings: deque[str] = deque(maxlen=100)  # what was recorded, for tests
        self._models_packets: dict[Version, bytes] = {}
        self._models_generation = -1

    def models_packet(self, version: Version | None = None) -> bytes:
        """NAT_MODELDEF of the scene in ``version`` (default: the server's own), encoded
        again only when the models change. 4.5 and later carry an anchor-marker
        description with opaque contents; a future Motive a type no known version has."""
        version = version or self.version
        if self._models_generation != self.stream.generation:
            self._models_packets.clear()
            self._models_generation = self.stream.generation
        packet = self._models_packets.get(version)
        if packet is None:
            defs = self.stream.model_definitions()
            if version.imu_gpio:
                defs.opaque.append(nn.Opaque(nn.ANCHOR_MARKER_DESCRIPTION, 1, ANCHOR_MARKER_BYTES))
            if self.future:
                defs.opaque.append(nn.Opaque(FUTURE_DESCRIPTION_TYPE, 1, FUTURE_DESCRIPTION_BYTES))
            packet = self._models_packets[version] = nn.encode_model_definitions(defs, version)
        return packet

    def take_params(self) -> int:
        """The params bits of the next frame; cleared once taken."""
        params, self.pending_params = self.pending_params, 0
        return params

    def reply(self, command: str) -> bytes:
        """The answer to one NAT_REQUEST command string (unknown ones: NAT_UNRECOGNIZED_REQUEST)."""
        name, _, argument = command.partition(",")
        name = name.strip().lower()
        if name == "bitstream":
            if not argument:
                return nn.encode_response(f"Bitstream,{self.version}")
            try:
                version = Version.parse(argument)
            except NatNetProtocolError:
                return nn.encode_response(-1)
            if not version.known:
                return nn.encode_response(-1)
            if version != self.version:
                log.info(f"bitstream changed from {self.version} to {version} on request")
                self.version = version
                self.pending_params |= nn.FRAME_BITSTREAM_CHANGED
            return nn.encode_response(0)
        if name == "framerate":
            return nn.encode_response(float(self.rate))
        if name == "renamerigidbody":  # stand-in extension: "RenameRigidBody,<id>,<new name>"
            body, _, new_name = argument.partition(",")
            ok = body.strip().lstrip("-").isdigit() and self.stream.rename_body(int(body), new_name.strip())
            if ok:
                log.info(f"rigid body {body} renamed to {new_name.strip()!r}")
                self.pending_params |= nn.FRAME_MODELS_CHANGED
            return nn.encode_response(0 if ok else -1)
        if name == "setrecordtakename":
            self.take_name = argument.strip()
            log.info(f"take name set to {self.take_name!r}")
            return nn.encode_response(0)
        if name in ("startrecording", "stoprecording"):
            # Motive answers 0 when it does what was asked; the stand-in refuses what
            # Motive cannot do (start twice, stop without a recording) with a non-zero code
            starting = name == "startrecording"
            if self.recording == starting:
                return nn.encode_response(1)
            self.recording = starting
            self.recordings.append(("started " if starting else "stopped ") + (self.take_name or "(unnamed)"))
            log.info(f"recording {self.recordings[-1]}")
            return nn.encode_response(0)
        if name in ("timelineplay", "timelinestop", "setplaybackcurrentframe", "livemode", "editmode"):
            return nn.encode_response(0)  # accepted, nothing to do for a live stand-in
        return nn.pack(MessageId.UNRECOGNIZED_REQUEST)
