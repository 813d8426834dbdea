"""The ROS side of an adapter's service offers: the services a node creates for the
:class:`~mocap4r2_control.adapter.ServiceOffer` an adapter declares.

They are created on the node itself, so ``~/name`` is under the node's name and its
namespace and remappings apply. Each service has a mutually exclusive callback group of
its own: a request may wait (the marker tracker's ``~/teach`` waits for seconds of
frames) while the adapter's topic inputs, in their group, keep delivering and the node's
default group keeps serving lifecycle and control requests.

An exception out of an offer's ``handle`` is caught: it would end the executor's spin,
and with it the node. The request is answered as a failure where the service type has
``success`` and ``message`` fields (``std_srvs/srv/Trigger``, ``SetBool``), else with the
response as it was; it is counted per service (``service_errors`` in /diagnostics) and
logged the first time for its service, so a client repeating a bad request cannot fill
the log.

A type that does not resolve or a name ROS refuses is raised as
:class:`~mocap4r2_control.adapter.ConfigurationError` naming the offer, for configure to
report; nothing is left offered then.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node

from .adapter import ConfigurationError, ServiceOffer
from .topic_inputs import interface_type

__all__ = ["ServiceOffers"]

LOG = logging.getLogger("mocap4r2.service_offers")


def _identity(callback: Callable[..., Any]) -> Callable[..., Any]:
    return callback


class ServiceOffers:
    """The services of one adapter's offers on ``node``, from :meth:`open` to :meth:`close`.

    ``wrap`` is applied to each service's callback (the node's log route, so what the
    adapter logs while answering reads as the node's)."""

    def __init__(self, node: Node, wrap: Callable[[Callable[..., Any]], Callable[..., Any]] = _identity):
        self.node = node
        self._wrap = wrap
        self._services: dict[str, Any] = {}
        self.errors: dict[str, int] = {}  # requests handle raised on, by declared name

    def open(self, offers: Sequence[ServiceOffer]) -> None:
        """Create every offered service (dropping any left from before); ConfigurationError
        naming the offer that cannot be created, with nothing left offered."""
        self.close()
        self.errors = {}
        self.add(offers)

    def add(self, offers: Sequence[ServiceOffer]) -> None:
        """Create the offered services not created yet (by name); ConfigurationError as
        :meth:`open`, with nothing left offered."""
        try:
            for offer in offers:
                if offer.name not in self._services:
                    self._services[offer.name] = self._create(offer)
        except BaseException:
            self.close()
            raise

    def _create(self, offer: ServiceOffer) -> Any:
        srv_type = interface_type(offer.type_name, "srv")

        def answer(request: Any, response: Any, name: str = offer.name, handle: Any = offer.handle) -> Any:
            try:
                answered = handle(request, response)
                if not isinstance(answered, srv_type.Response):
                    raise TypeError(f"the handler returned {type(answered).__name__}, not the response")
                return answered
            except Exception as exc:  # noqa: BLE001 - a request must never take the node down
                count = self.errors.get(name, 0) + 1
                self.errors[name] = count
                if count == 1:
                    LOG.error("a request to %s failed (logged once, counted): %r", name, exc)
                if hasattr(response, "success") and hasattr(response, "message"):
                    response.success, response.message = False, f"internal error: {exc!r}"
                return response

        try:
            return self.node.create_service(
                srv_type, offer.name, self._wrap(answer), callback_group=MutuallyExclusiveCallbackGroup()
            )
        except Exception as exc:  # rclpy's name validation, ...
            raise ConfigurationError(f"cannot offer {offer.name!r} ({offer.type_name}): {exc}") from None

    @property
    def count(self) -> int:
        """How many services are offered."""
        return len(self._services)

    def status(self) -> dict[str, str]:
        """For /diagnostics: the requests answered as failures because ``handle`` raised."""
        total = sum(self.errors.values())
        return {"service_errors": str(total)} if total else {}

    def close(self) -> None:
        """Destroy the services; safe twice and while the node is being destroyed. A
        request being handled is not answered."""
        services, self._services = self._services, {}
        for service in services.values():
            with contextlib.suppress(Exception):  # the node is being destroyed already
                self.node.destroy_service(service)
