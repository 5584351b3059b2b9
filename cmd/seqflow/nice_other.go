//go:build !linux

package main

// lowerPriority is a no-op off Linux.
func lowerPriority(int) error { return nil }
