"""A port: one model to one or more framework x hardware pairs, stage by stage.
"""
