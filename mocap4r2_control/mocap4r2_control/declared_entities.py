"""What an adapter declares and the node creates for it, held from configure to cleanup.

An adapter declares ROS entities as plain values (:class:`~mocap4r2_control.adapter.TopicInput`,
:class:`~mocap4r2_control.adapter.ServiceOffer`); the node creates them on itself at
configure, may add more declared after ``connect``, and destroys them all at cleanup. The
rules of that life are the same for each kind, so they live here once; each kind says only
how one is created and destroyed (topic_inputs.py, service_offers.py):

- creating is all or nothing: one declaration that cannot be created (raised as
  :class:`~mocap4r2_control.adapter.ConfigurationError` naming it) leaves none created;
- an entity equal to one already created is the same entity, created once;
- an exception out of the adapter's callback is counted per declared name for
  /diagnostics and logged only the first time for that name, so a peer repeating a bad
  message or request cannot fill the log;
- destroying is safe twice and while the node itself is being destroyed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Hashable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from rclpy.node import Node

__all__ = ["DeclaredEntities"]

Declaration = TypeVar("Declaration", bound=Hashable)


class DeclaredEntities(Generic[Declaration]):
    """The entities created on ``node`` for one adapter's declarations of one kind.

    A subclass names its /diagnostics key (``STATUS_KEY``) and implements
    :meth:`_key`, :meth:`_create` and :meth:`_destroy`."""

    STATUS_KEY: ClassVar[str] = ""

    def __init__(self, node: Node, log: logging.Logger) -> None:
        self.node = node
        self._log = log
        self._entities: dict[Hashable, Any] = {}
        self.errors: dict[str, int] = {}  # the adapter's callback raised, by declared name

    def open(self, declarations: Sequence[Declaration]) -> None:
        """Create every declared entity (dropping any left from before); ConfigurationError
        naming the one that cannot be created, with nothing left created."""
        self.close()
        self.errors = {}
        self.add(declarations)

    def add(self, declarations: Sequence[Declaration]) -> None:
        """Create the declared entities not created yet; ConfigurationError as
        :meth:`open`, with nothing left created."""
        try:
            for declaration in declarations:
                key = self._key(declaration)
                if key not in self._entities:
                    self._entities[key] = self._create(declaration)
        except BaseException:
            self.close()
            raise

    @property
    def count(self) -> int:
        """How many entities are created."""
        return len(self._entities)

    def status(self) -> dict[str, str]:
        """For /diagnostics: how often the adapter's callback raised, if it did."""
        total = sum(self.errors.values())
        return {self.STATUS_KEY: str(total)} if total else {}

    def close(self) -> None:
        """Destroy every entity; safe twice and while the node is being destroyed."""
        entities, self._entities = self._entities, {}
        self._closed()
        for entity in entities.values():
            with contextlib.suppress(Exception):  # the node is being destroyed already
                self._destroy(entity)

    def _count_error(self, name: str, what: str, exc: BaseException) -> None:
        """Count a failure of the adapter's callback for ``name``; log it the first time."""
        count = self.errors.get(name, 0) + 1
        self.errors[name] = count
        if count == 1:
            self._log.error("%s (logged once, counted): %r", what, exc)

    def _key(self, declaration: Declaration) -> Hashable:
        """What makes two declarations the same entity."""
        return declaration

    def _create(self, declaration: Declaration) -> Any:
        raise NotImplementedError

    def _destroy(self, entity: Any) -> None:
        raise NotImplementedError

    def _closed(self) -> None:
        """Called by :meth:`close` before the entities are destroyed (a subclass's own state)."""
