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


class MotiveCommands:
    """The command answers and the state they change: version, take name, recording."""

    def __init__(self, stream: SceneStream, version: Version, rate: float) -> None:
        self.stream = stream
        self.version = version
        self.rate = rate
        self.pending_params = 0  # FRAME_* bits for the next frame
        self.take_name = ""  # SetRecordTakeName
        self.recording = False  # StartRecording / StopRecording
        self.recordings: deque[str] = deque(maxlen=100)  # what was recorded, for tests
        self._models_packet: bytes | None = None
        self._models_generation = -1
        self._models_version: Version | None = None

    def models_packet(self) -> bytes:
        """NAT_MODELDEF of the scene, encoded again only when the models or the version change."""
        packet = self._models_packet
        if (
            packet is None
            or self._models_generation != self.stream.generation
            or self._models_version != self.version
        ):
            packet = self._models_packet = nn.encode_model_definitions(
                self.stream.model_definitions(), self.version
            )
            self._models_generation = self.stream.generation
            self._models_version = self.version
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
                version = nn.require_supported(Version.parse(argument))
            except NatNetProtocolError:
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
