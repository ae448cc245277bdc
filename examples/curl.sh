#!/usr/bin/env bash
# The KServe v2 REST API with curl against a running nereid (make run).
set -euo pipefail
host=${1:-localhost:8000}
set -x
curl -s -o /dev/null -w '%{http_code}\n' "$host/v2/health/ready"
curl -s "$host/v2"; echo
curl -s "$host/v2/models/simple"; echo
curl -s "$host/v2/models/simple/infer" -d '{
  "id": "curl-1",
  "inputs": [
    {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},
    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}
  ],
  "outputs": [{"name": "OUTPUT0"}]}'; echo
curl -s -X POST "$host/v2/repository/index"; echo
curl -s "$host/v2/models/simple/stats"; echo
