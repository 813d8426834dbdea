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

import logging
from collections.abc import Callable
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node

from .adapter import ConfigurationError, ServiceOffer
from .declared_entities import DeclaredEntities
from .topic_inputs import interface_type

__all__ = ["ServiceOffers"]

LOG = logging.getLogger("mocap4r2.service_offers")


def _identity(callback: Callable[..., Any]) -> Callable[..., Any]:
    return callback


class ServiceOffers(DeclaredEntities[ServiceOffer]):
    """The services of one adapter's offers on ``node``, from :meth:`open` to :meth:`close`
    (a request being handled then is not answered).

    ``wrap`` is applied to each service's callback (the node's log route, so what the
    adapter logs while answering reads as the node's)."""

    STATUS_KEY = "service_errors"

    def __init__(self, node: Node, wrap: Callable[[Callable[..., Any]], Callable[..., Any]] = _identity):
        super().__init__(node, LOG)
        self._wrap = wrap

    def _key(self, offer: ServiceOffer) -> str:
        return offer.name  # one service per name

    def _create(self, offer: ServiceOffer) -> Any:
        srv_type = interface_type(offer.type_name, "srv")

        def answer(request: Any, response: Any, name: str = offer.name, handle: Any = offer.handle) -> Any:
            try:
                answered = handle(request, response)
                if not isinstance(answered, srv_type.Response):
                    raise TypeError(f"the handler returned {type(answered).__name__}, not the response")
                return answered
            except Exception as exc:  # noqa: BLE001 - a request must never take the node down
                self._count_error(name, f"a request to {name} failed", exc)
                if hasattr(response, "success") and hasattr(response, "message"):
                    response.success, response.message = False, f"internal error: {exc!r}"
                return response

        try:
            return self.node.create_service(
                srv_type, offer.name, self._wrap(answer), callback_group=MutuallyExclusiveCallbackGroup()
            )
        except Exception as exc:  # rclpy's name validation, ...
            raise ConfigurationError(f"cannot offer {offer.name!r} ({offer.type_name}): {exc}") from None

    def _destroy(self, entity: Any) -> None:
        self.node.destroy_service(entity)
