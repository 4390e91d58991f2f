"""Generated TFLite flatbuffer bindings (schema_generated.py) and the schema they come from; see README.md."""
