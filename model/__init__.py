"""The policy contract shared by training and serving.

Everything here must import without torch: the service loads it next to onnxruntime.
"""
