package daemon

import (
	"testing"
)

// The daemon's steady-state work at 100 ports, one piece at a time; the
// whole daemon's CPU share is measured by scripts/bench-daemon.sh. Needs
// root (the datapath is loaded, attached nowhere).

func BenchmarkTick100Ports(b *testing.B) {
	d := startTestDaemon(b, testConfig(100, "500ms", "5s", 128))
	b.ReportAllocs()
	for b.Loop() {
		d.tick()
	}
}

func BenchmarkOnsetCheck100Ports(b *testing.B) {
	d := startTestDaemon(b, testConfig(100, "500ms", "5s", 128))
	d.onsetCheck() // the baseline
	b.ReportAllocs()
	for b.Loop() {
		d.onsetCheck()
	}
}

func BenchmarkPublish100Ports(b *testing.B) {
	d := startTestDaemon(b, testConfig(100, "500ms", "5s", 128))
	b.ReportAllocs()
	for b.Loop() {
		d.publish()
	}
}

func BenchmarkTick1Port(b *testing.B) {
	d := startTestDaemon(b, testConfig(1, "500ms", "5s", 128))
	b.ReportAllocs()
	for b.Loop() {
		d.tick()
	}
}

func BenchmarkOnsetCheck1Port(b *testing.B) {
	d := startTestDaemon(b, testConfig(1, "500ms", "5s", 128))
	d.onsetCheck()
	b.ReportAllocs()
	for b.Loop() {
		d.onsetCheck()
	}
}
