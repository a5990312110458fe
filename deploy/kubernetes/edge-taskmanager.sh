#!/bin/sh
# Start-up of an edge TaskManager (one per GPU node; edge-taskmanagers.yaml), the Kubernetes
# counterpart of `scripts/cluster.sh add-taskmanager -D ...`: reads the node index n from the
# StatefulSet ordinal at the end of the pod name (stoker-edge-<n>) and starts a TaskManager that
# declares only the external resource stoker-node-<n>, with one slot per local rank. Every other
# setting comes from the cluster's config (the FlinkDeployment's ConfigMap, in $FLINK_CONF_DIR).
#
# Environment: POD_NAME (the pod's name, from the downward API), STOKER_RANKS_PER_NODE (ranks of
# the trainer on this node), STOKER_EDGE_PROCESS_SIZE (taskmanager.memory.process.size), FLINK_HOME.
set -eu
: "${POD_NAME:?POD_NAME (the pod name, from the downward API) is not set}"
: "${STOKER_RANKS_PER_NODE:?STOKER_RANKS_PER_NODE (ranks on this node) is not set}"
: "${STOKER_EDGE_PROCESS_SIZE:?STOKER_EDGE_PROCESS_SIZE (taskmanager.memory.process.size) is not set}"
n=${POD_NAME##*-}
case $n in
  '' | *[!0-9]*) echo "edge-taskmanager: no StatefulSet ordinal at the end of the pod name '$POD_NAME'" >&2; exit 1 ;;
esac
case $STOKER_RANKS_PER_NODE in
  '' | 0 | *[!0-9]*) echo "edge-taskmanager: STOKER_RANKS_PER_NODE must be a positive integer, not '$STOKER_RANKS_PER_NODE'" >&2; exit 1 ;;
esac
node=stoker-node-$n
echo "edge-taskmanager: $POD_NAME declares $node: $STOKER_RANKS_PER_NODE" >&2
exec "$FLINK_HOME/bin/taskmanager.sh" start-foreground \
  -D "external-resources=$node" \
  -D "external-resource.$node.amount=$STOKER_RANKS_PER_NODE" \
  -D "taskmanager.numberOfTaskSlots=$STOKER_RANKS_PER_NODE" \
  -D "taskmanager.memory.process.size=$STOKER_EDGE_PROCESS_SIZE" \
  -D "taskmanager.resource-id=$POD_NAME"
