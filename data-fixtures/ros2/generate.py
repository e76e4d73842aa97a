"""Writes the ROS 2 MCAP fixtures halflife's `#ext.ros` tests read, with an implementation
that is not halflife's: Foxglove's Python `mcap` and `mcap-ros2-support` (PyPI), which
serialize each message to CDR from its `ros2msg` definition text as rosbag2 stores it.

    python3 -m venv /tmp/rosenv && /tmp/rosenv/bin/pip install mcap==1.6.0 mcap-ros2-support==0.6.0
    /tmp/rosenv/bin/python data-fixtures/ros2/generate.py

Writes, next to this script:

- `robot-zstd.mcap`, `robot-lz4.mcap`, `robot-none.mcap`: the same recording (a camera,
  an IMU, odometry, joint states, diagnostics and a chatter topic) with zstd, lz4 and no
  chunk compression, in small chunks so each file has several;
- `expected.json`: every message as the same library decodes it back, per topic in log
  order: `{"topic", "schema", "log_time", "message"}`, bytes as lists of numbers.

The data is deterministic: running the script again writes the same messages.
"""

import json
import math
import os
import sys

from mcap.reader import make_reader
from mcap.writer import CompressionType
from mcap_ros2.decoder import DecoderFactory
from mcap_ros2.writer import Writer

HERE = os.path.dirname(os.path.abspath(__file__))

SEP = "=" * 80 + "\n"

TIME = "int32 sec\nuint32 nanosec\n"
HEADER = "builtin_interfaces/Time stamp\nstring frame_id\n"
VECTOR3 = "float64 x\nfloat64 y\nfloat64 z\n"
QUATERNION = "float64 x 0\nfloat64 y 0\nfloat64 z 0\nfloat64 w 1\n"
POINT = "float64 x\nfloat64 y\nfloat64 z\n"


def deps(*items):
    return "".join(f"{SEP}MSG: {name}\n{text}" for name, text in items)


IMAGE = (
    "std_msgs/Header header\nuint32 height\nuint32 width\nstring encoding\n"
    "uint8 is_bigendian\nuint32 step\nuint8[] data\n"
    + deps(("std_msgs/Header", HEADER), ("builtin_interfaces/Time", TIME))
)
IMU = (
    "std_msgs/Header header\n"
    "geometry_msgs/Quaternion orientation\nfloat64[9] orientation_covariance\n"
    "geometry_msgs/Vector3 angular_velocity\nfloat64[9] angular_velocity_covariance\n"
    "geometry_msgs/Vector3 linear_acceleration\nfloat64[9] linear_acceleration_covariance\n"
    + deps(
        ("std_msgs/Header", HEADER),
        ("builtin_interfaces/Time", TIME),
        ("geometry_msgs/Quaternion", QUATERNION),
        ("geometry_msgs/Vector3", VECTOR3),
    )
)
ODOMETRY = (
    "std_msgs/Header header\nstring child_frame_id\n"
    "geometry_msgs/PoseWithCovariance pose\ngeometry_msgs/TwistWithCovariance twist\n"
    + deps(
        ("std_msgs/Header", HEADER),
        ("builtin_interfaces/Time", TIME),
        ("geometry_msgs/PoseWithCovariance", "Pose pose\nfloat64[36] covariance\n"),
        ("geometry_msgs/Pose", "Point position\nQuaternion orientation\n"),
        ("geometry_msgs/Point", POINT),
        ("geometry_msgs/Quaternion", QUATERNION),
        ("geometry_msgs/TwistWithCovariance", "Twist twist\nfloat64[36] covariance\n"),
        ("geometry_msgs/Twist", "Vector3  linear\nVector3  angular\n"),
        ("geometry_msgs/Vector3", VECTOR3),
    )
)
JOINT_STATE = (
    "std_msgs/Header header\nstring[] name\nfloat64[] position\nfloat64[] velocity\n"
    "float64[] effort\n"
    + deps(("std_msgs/Header", HEADER), ("builtin_interfaces/Time", TIME))
)
DIAGNOSTICS = (
    "std_msgs/Header header # for timestamp\nDiagnosticStatus[] status # an array of components\n"
    + deps(
        ("std_msgs/Header", HEADER),
        ("builtin_interfaces/Time", TIME),
        (
            "diagnostic_msgs/DiagnosticStatus",
            "byte OK=0\nbyte WARN=1\nbyte ERROR=2\nbyte STALE=3\n"
            "byte level\nstring name\nstring message\nstring hardware_id\nKeyValue[] values\n",
        ),
        ("diagnostic_msgs/KeyValue", "string key\nstring value\n"),
    )
)
STRING = "string data\n"

BASE_NS = 1_753_341_400_000_000_000


def stamp(ns):
    return {"sec": ns // 1_000_000_000, "nanosec": ns % 1_000_000_000}


def header(ns, frame):
    return {"stamp": stamp(ns), "frame_id": frame}


def image(i, ns, encoding):
    width, height = 16, 12
    channels = 1 if encoding == "mono8" else 3
    data = bytes(
        (x * 13 + y * 7 + c * 50 + i * 3) % 256
        for y in range(height)
        for x in range(width)
        for c in range(channels)
    )
    return {
        "header": header(ns, "camera"),
        "height": height,
        "width": width,
        "encoding": encoding,
        "is_bigendian": 0,
        "step": width * channels,
        "data": data,
    }


def imu(i, ns):
    t = i / 100.0
    return {
        "header": header(ns, "imu_link"),
        "orientation": {"x": 0.0, "y": 0.0, "z": math.sin(t / 2), "w": math.cos(t / 2)},
        "orientation_covariance": [0.01 * (k + 1) for k in range(9)],
        "angular_velocity": {"x": 0.001 * i, "y": -0.002 * i, "z": 0.5},
        "angular_velocity_covariance": [0.0] * 9,
        "linear_acceleration": {"x": 0.1, "y": -0.05 * (i % 7), "z": 9.81},
        "linear_acceleration_covariance": [float(k) for k in range(9)],
    }


def odometry(i, ns):
    return {
        "header": header(ns, "odom"),
        "child_frame_id": "base_link",
        "pose": {
            "pose": {
                "position": {"x": 0.25 * i, "y": 0.1 * i, "z": 0.0},
                "orientation": {"x": 0.0, "y": 0.0, "z": 0.0, "w": 1.0},
            },
            "covariance": [0.001 * k for k in range(36)],
        },
        "twist": {
            "twist": {
                "linear": {"x": 0.5, "y": 0.0, "z": 0.0},
                "angular": {"x": 0.0, "y": 0.0, "z": 0.1 * (i % 3)},
            },
            "covariance": [0.0] * 36,
        },
    }


def joints(i, ns):
    names = ["shoulder", "elbow", "wrist"][: 1 + i % 3]
    return {
        "header": header(ns, ""),
        "name": names,
        "position": [0.1 * i + k for k in range(len(names))],
        "velocity": [0.5] * len(names),
        "effort": [],
    }


def diagnostics(i, ns):
    return {
        "header": header(ns, ""),
        "status": [
            {
                "level": i % 3,
                "name": f"motor {k}",
                "message": "ok" if i % 3 == 0 else "temperature high",
                "hardware_id": f"m{k}",
                "values": [{"key": "temp", "value": str(40 + i + k)}, {"key": "rpm", "value": "1200"}][: k + 1],
            }
            for k in range(i % 3)
        ],
    }


def write(path, compression):
    with open(path, "wb") as f:
        w = Writer(f, chunk_size=16 * 1024, compression=compression)
        schemas = {
            "image": w.register_msgdef("sensor_msgs/msg/Image", IMAGE),
            "imu": w.register_msgdef("sensor_msgs/msg/Imu", IMU),
            "odom": w.register_msgdef("nav_msgs/msg/Odometry", ODOMETRY),
            "joints": w.register_msgdef("sensor_msgs/msg/JointState", JOINT_STATE),
            "diag": w.register_msgdef("diagnostic_msgs/msg/DiagnosticArray", DIAGNOSTICS),
            "string": w.register_msgdef("std_msgs/msg/String", STRING),
        }
        encodings = ["rgb8", "bgr8", "mono8"]
        for i in range(200):
            ns = BASE_NS + i * 10_000_000  # 100 Hz
            # The header stamp lags the log time by 2 ms, as a driver's would.
            stamped = ns - 2_000_000
            w.write_message("/imu", schemas["imu"], imu(i, stamped), log_time=ns, sequence=i)
            if i % 10 == 0:
                w.write_message("/odom", schemas["odom"], odometry(i, stamped), log_time=ns + 1, sequence=i)
                w.write_message("/joint_states", schemas["joints"], joints(i, stamped), log_time=ns + 2, sequence=i)
            if i % 20 == 0:
                enc = encodings[(i // 20) % 3]
                w.write_message("/camera/image_raw", schemas["image"], image(i, stamped, enc), log_time=ns + 3, sequence=i)
                w.write_message("/diagnostics", schemas["diag"], diagnostics(i // 20, stamped), log_time=ns + 4, sequence=i)
            if i % 50 == 0:
                w.write_message("/chatter", schemas["string"], {"data": f"hello {i}"}, log_time=ns + 5, sequence=i)
        w.finish()


def plain(value):
    """A decoded message as JSON: its fields in definition order, bytes as numbers."""
    if isinstance(value, (bytes, bytearray)):
        return list(value)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "__slots__"):
        return {k: plain(getattr(value, k)) for k in value.__slots__}
    return value


def expected(path):
    out = []
    with open(path, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        for schema, channel, message, decoded in reader.iter_decoded_messages(log_time_order=True):
            out.append(
                {
                    "topic": channel.topic,
                    "schema": schema.name,
                    "log_time": message.log_time,
                    "message": plain(decoded),
                }
            )
    return out


def main():
    files = {
        "robot-zstd.mcap": CompressionType.ZSTD,
        "robot-lz4.mcap": CompressionType.LZ4,
        "robot-none.mcap": CompressionType.NONE,
    }
    for name, compression in files.items():
        write(os.path.join(HERE, name), compression)
    decoded = [expected(os.path.join(HERE, name)) for name in files]
    if any(d != decoded[0] for d in decoded):
        sys.exit("the three files decode differently")
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(decoded[0], f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
