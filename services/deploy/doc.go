// Package deploy holds the offline checks of deploy/: every kustomize
// overlay of deploy/k8s is rendered with the kustomize library and the Helm
// chart deploy/helm/conch with the Helm library (and linted), every object
// is decoded strictly into the Kubernetes API types, and the result is held
// to the invariants a cluster would otherwise reveal only at apply or run
// time. deploy/compose/compose.yaml and the images are checked against the
// same binary: every flag and setting passed is one it accepts. The
// package has no code of its own, only tests; imagestest runs the images
// themselves.
package deploy
