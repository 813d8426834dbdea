"""Vicon (Nexus, Tracker, Shogun) through the DataStream SDK's Python API: the SDK is
the protocol and the client; ``vicon_system`` holds the adapter."""
