//go:build long

package testrule

// Long is true in a build with the tag long, whose tests may take as long as
// they need: a test that samples in the default run goes through every case
// when Long is set.
const Long = true
