package main

import (
	"context"
	"io"
)

func runReceive(ctx context.Context, stdout, stderr io.Writer, args []string) int { return exitUsage }
func runNoop(ctx context.Context, stdout, stderr io.Writer, args []string) int    { return exitUsage }
func runServe(ctx context.Context, stdout, stderr io.Writer, args []string) int   { return exitUsage }
