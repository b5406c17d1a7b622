// Package spawner turns a KubeSpawner-compatible configuration and a hub's
// spawn request into the Kubernetes objects a spawn creates; it is pure,
// with no I/O beyond reading the configuration file.
package spawner
