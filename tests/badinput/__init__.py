"""Bad input: flags, env, kubeconfig, Lease fields, state dir, annotations."""
