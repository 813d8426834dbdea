"""VRPN (vrpn_Tracker devices of any VRPN server: Vicon Tracker, Motive, DTrack, ...) in
pure Python: ``protocol`` (the connection protocol and tracker reports, pure),
``client`` (sockets: both ways of connecting, id translation, ping/pong, reconnect),
``convert`` (tracker reports to MocapFrame), ``simulator`` (a VRPN server stand-in, the
``vrpn_simulator`` command) and ``vrpn_system`` (the adapter)."""
