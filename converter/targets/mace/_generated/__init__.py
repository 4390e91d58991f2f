"""Generated MACE protobuf bindings (mace_pb2.py) and the mace.proto they come from; see README.md."""
