"""The injector: an admission webhook that adds the sidecar to annotated pods.

Pure (no I/O, no kopf, never raising): ``annotations`` reads the pod's
settings, ``patch`` decides (a denial naming what to fix, or the JSON patch),
``review`` answers the AdmissionReview, ``webhookconfig`` is the one definition
of the MutatingWebhookConfiguration. Against the API, through ``kube``:
``sweep`` and ``rbac``. ``operator`` is the only module that imports kopf;
``settings`` and ``main`` are ``grelmicro-sidecar injector [flags]``.
"""
