// Package checkpoints is about parked runs: the record of a run's
// checkpoint (which worker shape can restore it), the sealing of its bytes
// under the checkpoint encryption key before they leave the worker, and
// the blob store that holds them in between.
package checkpoints
