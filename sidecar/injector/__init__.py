"""The injector: an admission webhook that adds the sidecar to annotated pods.

Layers, by what they may import:

- ``annotations`` and ``patch``: pure. A pod (a dict) in, a decision out: the
  settings read from the pod's annotations, then either a denial naming the
  annotation, the value and the accepted form, or the JSON patch that injects
  the sidecar. No I/O, no kopf; they never raise on any input.
- ``webhookconfig``: the one definition of the MutatingWebhookConfiguration
  (the chart and the tests both build from it).
- ``settings``: the injector's flags and env, validated before anything starts.
- ``sweep``, ``rbac``: the operator's duties against the API, through the
  ``kube`` layer (``LeaseStore``, ``KubeApi``: the sidecar's call path; no kopf).
- ``operator``: the only module that imports kopf; wiring only.
- ``main``: ``grelmicro-sidecar injector [flags]``.
"""
