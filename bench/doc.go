// Package bench holds the benchmarks behind BENCHMARKS.md. Each compares
// against a baseline measured in the same run.
package bench
