package adaptive

import (
	"fmt"
	"testing"
)

func TestTmpTrace(t *testing.T) {
	at := 10.05
	load := func(now float64) float64 {
		if now >= at && now < at+30 {
			return 600
		}
		return 100
	}
	_, ds := runQueuePlant(t, harnessController(t), 1, load, queueOpts{onset: true}, at+8, at, at+30)
	for _, d := range ds {
		tk := d.At.Sub(TraceOrigin).Seconds()
		if tk > 9.5 && tk < 14 {
			fmt.Printf("%.2f p=%.3f %s\n", tk, d.DropProbability, d.Reason)
		}
	}
}
