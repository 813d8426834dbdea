"""Qualisys Track Manager (QTM) real-time protocol.

* :mod:`.protocol` - packet framing and data components (little-endian, protocol 1.2x); pure;
* :mod:`.simulator` - ``qtm_simulator``, a QTM RT server serving a simulated scene (it
  also writes QTM's parameter XML);
* :mod:`.client` - the qtm-rt based connection of the ``qualisys_system`` adapter (it
  also parses QTM's parameter XML).
"""
