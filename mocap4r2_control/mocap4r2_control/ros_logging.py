"""Python `logging` records of adapters and protocol code, into the node's ROS log.

Protocol modules (NatNet, QTM RT, ...) must not import rclpy, so they log through
Python's logging under the "mocap4r2" namespace; a system node forwards that namespace
to its own rclpy logger, so the messages reach /rosout and the console like the rest.
"""

from __future__ import annotations

import logging

NAMESPACE = "mocap4r2"


class RosLogHandler(logging.Handler):
    def __init__(self, ros_logger):
        super().__init__()
        self.ros_logger = ros_logger

    def emit(self, record: logging.LogRecord) -> None:
        try:
            source = record.name.split(".", 1)[1] if "." in record.name else record.name
            text = f"[{source}] {record.getMessage()}"
            if record.levelno >= logging.ERROR:
                self.ros_logger.error(text)
            elif record.levelno >= logging.WARNING:
                self.ros_logger.warning(text)
            elif record.levelno >= logging.INFO:
                self.ros_logger.info(text)
            else:
                self.ros_logger.debug(text)
        except Exception:  # noqa: BLE001 - logging must never break the reader thread
            self.handleError(record)


def forward_python_logging(ros_logger, level: int = logging.INFO) -> None:
    """Send records of the "mocap4r2.*" loggers to ``ros_logger`` (replacing a previous
    forwarding, so a process with one node logs each record once)."""
    logger = logging.getLogger(NAMESPACE)
    for handler in [h for h in logger.handlers if isinstance(h, RosLogHandler)]:
        logger.removeHandler(handler)
    logger.addHandler(RosLogHandler(ros_logger))
    logger.setLevel(level)
    logger.propagate = False
