// Package imagestest drives the images `make images` builds as a real
// multi-container cluster, started from deploy/compose/compose.yaml: the
// test `make images-test` runs (scripts/images-test.sh). It needs a
// container engine and the built images, so its test is behind the build
// tag imagestest and never part of `make test`.
//
// The engine and the compose command come from the environment:
// CONTAINER_ENGINE (podman or docker) and CONCH_COMPOSE (for instance
// "podman-compose" or "docker compose"); CONCH_BIN is bin/conch, for the
// client commands. Logs of every container are
// written to CONCH_IMAGES_TEST_LOGS (default: the test's temp dir) and
// printed when the test fails.
package imagestest
