"""A separate process for the interface round trip: echoes every mocap4r2 message from
/roundtrip/in/<Type> to /roundtrip/out/<Type>, and serves SetOrigin by echoing the
request into the response message."""
import sys

import rclpy
from mocap4r2_interfaces import msg as m
from mocap4r2_interfaces.srv import SetOrigin
from rclpy.qos import QoSProfile, ReliabilityPolicy

TYPES = ["Marker", "Markers", "RigidBody", "RigidBodies", "Segment", "Skeleton", "Skeletons",
         "MocapSystemInfo", "Control", "ControlAck", "TrajectoryError"]


def main():
    rclpy.init(args=sys.argv)
    node = rclpy.create_node("interfaces_echo")
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    keep = []
    for name in TYPES:
        cls = getattr(m, name)
        pub = node.create_publisher(cls, f"/roundtrip/out/{name}", qos)
        keep.append(node.create_subscription(cls, f"/roundtrip/in/{name}", pub.publish, qos))

    def set_origin(request, response):
        p = request.origin.position
        response.success = not request.use_current
        response.message = f"{p.x},{p.y},{p.z},{request.origin.orientation.w}"
        return response

    node.create_service(SetOrigin, "/roundtrip/set_origin", set_origin)
    print("echo ready", flush=True)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, rclpy.executors.ExternalShutdownException):
        pass


if __name__ == "__main__":
    main()
