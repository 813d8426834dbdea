"""VRPN (vrpn_Tracker devices of any VRPN server: Vicon Tracker, Motive, DTrack, ...) in
pure Python: ``protocol`` (the connection protocol and tracker reports, pure),
``client`` (one connection: handshake, ping/pong, reconnect), ``transport`` (its
sockets: both ways of connecting, bounded reads), ``dialog`` (id translation, when to
ping), ``convert`` (tracker reports to MocapFrame), ``simulator`` (a VRPN server
stand-in, the ``vrpn_simulator`` command) and ``vrpn_system`` (the adapter)."""
