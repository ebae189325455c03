"""Message and stub modules generated from podresources.proto (kubelet PodResources API, v1).

Regenerate from the repository root with:
    python -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. exporter/_proto/podresources.proto
"""
