"""Qualisys Track Manager (QTM) over the QTM RT protocol: ``protocol`` (packet framing
and data components, pure), ``client`` (the qtm-rt connection and QTM's parameter XML),
``convert`` (data packets to MocapFrame), ``simulator`` (a QTM stand-in, the
``qtm_simulator`` command) and ``qualisys_system`` (the adapter)."""
