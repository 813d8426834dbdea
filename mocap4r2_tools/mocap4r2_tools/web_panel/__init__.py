"""web_panel: the lab's control panel in the browser (systems, sessions, a live 3D view).

``core`` holds what needs no ROS and no server (validation of what the page sends, the
security rules, the live frames' compact form); ``ros_side`` is the rclpy half (one
thread), ``server`` the aiohttp half (another thread), ``node`` the executable."""
