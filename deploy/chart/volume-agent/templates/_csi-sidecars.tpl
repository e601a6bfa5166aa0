{{/*
The upstream CSI sidecars of csi.enabled, beside the agent in its pod.
Each reaches the agent's socket in the shared csi-plugin-dir at /csi, and
the API server with the pod's ServiceAccount token (RBAC in csi-rbac.yaml,
held to the pod's node by node-restriction.yaml). None is privileged: only
the agent mounts.
*/}}
{{- define "volume-agent.csiSidecars" -}}
# Provisions the claims of classes naming local.volume-agent.io that the
# scheduler placed on this node (CreateVolume), deletes this node's
# released volumes (DeleteVolume: the agent keeps --reclaim-delay), and
# publishes this node's CSIStorageCapacity per class from GetCapacity.
# Every node runs its own (node deployment): a central one could reach only
# its own node's agent.
- name: csi-provisioner
  image: {{ .Values.csi.provisioner.image | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy | quote }}
  args:
    - --csi-address=/csi/csi.sock
    - --node-deployment=true
    # Claims wait for their first consumer: the scheduler picks the node
    # (from the published capacity), never a race between the nodes.
    - --node-deployment-immediate-binding=false
    - --enable-capacity
    # The DaemonSet (the pod's controller) owns the CSIStorageCapacity
    # objects: they go with it.
    - --capacity-ownerref-level=1
    # The claim's namespace and name reach CreateVolume, which names the
    # volume's directory after them.
    - --extra-create-metadata
    # A DeleteVolume refused until --reclaim-delay ends is retried at
    # least once a minute.
    - --retry-interval-max=1m
    # One per node, each for its own node's claims: nothing to elect.
    - --leader-election=false
  env:
    # Only claims whose volume.kubernetes.io/selected-node is this node.
    - name: NODE_NAME
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    # Where the CSIStorageCapacity objects go, and the pod whose owner
    # owns them.
    - name: NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
  {{- with .Values.csi.provisioner.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- include "volume-agent.sidecarSecurity" . | nindent 2 }}
  volumeMounts:
    - name: csi-plugin-dir
      mountPath: /csi
# Grows claims of classes with allowVolumeExpansion: the driver expands on
# the node only (NodeExpandVolume, online), so this is csi-resizer's
# trivial resizer: it marks the PV grown and the claim waiting for the
# kubelet, which calls the agent of the volume's node. One is active in
# the cluster (the Lease external-resizer-local-volume-agent-io in this
# namespace); the others wait.
- name: csi-resizer
  image: {{ .Values.csi.resizer.image | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy | quote }}
  args:
    - --csi-address=/csi/csi.sock
    - --leader-election=true
    - {{ printf "--leader-election-namespace=%s" .Release.Namespace | quote }}
    # The trivial resizer never calls ControllerExpandVolume, so a volume
    # in use never refuses it: no watch of every pod of the cluster.
    - --handle-volume-inuse-error=false
  {{- with .Values.csi.resizer.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- include "volume-agent.sidecarSecurity" . | nindent 2 }}
  volumeMounts:
    - name: csi-plugin-dir
      mountPath: /csi
# Takes and deletes the snapshots of this node's volumes (CreateSnapshot,
# DeleteSnapshot) for the VolumeSnapshotContents the snapshot-controller
# (run with --enable-distributed-snapshotting) labels with this node.
- name: csi-snapshotter
  image: {{ .Values.csi.snapshotter.image | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy | quote }}
  args:
    - --csi-address=/csi/csi.sock
    - --node-deployment=true
    - --leader-election=false
    # The driver has no group snapshots; without this the sidecar lists
    # VolumeGroupSnapshot objects, which its RBAC does not grant.
    - --feature-gates=CSIVolumeGroupSnapshot=false
    # A DeleteSnapshot refused until --reclaim-delay ends is retried at
    # least once a minute (the default backoff reaches 5 minutes).
    - --retry-interval-max=1m
  env:
    - name: NODE_NAME
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
  {{- with .Values.csi.snapshotter.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- include "volume-agent.sidecarSecurity" . | nindent 2 }}
  volumeMounts:
    - name: csi-plugin-dir
      mountPath: /csi
{{- end -}}

{{/*
The sidecars' security context: no privileges, no capabilities, a
read-only root. They run as the image's user (root in the upstream
images), the owner of the agent's socket, which they must write to connect.
*/}}
{{- define "volume-agent.sidecarSecurity" -}}
securityContext:
  privileged: false
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
  seccompProfile:
    type: RuntimeDefault
{{- end -}}
