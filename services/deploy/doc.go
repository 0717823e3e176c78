// Package deploy holds the offline checks of deploy/k8s and the container
// images: every kustomize overlay is rendered with the kustomize library,
// every object is decoded strictly into the Kubernetes API types, and the
// result is held to the invariants a cluster would otherwise reveal only at
// apply or run time. The package has no code of its own, only tests.
package deploy
