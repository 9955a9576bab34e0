package adaptive_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/plant"
)

func TestDiag(t *testing.T) {
	name := os.Getenv("DIAG")
	if name == "" {
		t.Skip()
	}
	seed, _ := strconv.Atoi(os.Getenv("SEED"))
	sc, _, err := plant.ParseScenario(name, uint64(seed))
	if err != nil {
		t.Fatal(err)
	}
	res, _ := plant.Drive(clientController(t, nil), sc, adaptive.PortKey{Proto: adaptive.ProtoTCP, Port: clientPort}, 5, func(d plant.DriveTick) {
		if os.Getenv("TICKS") != "" {
			t.Logf("t=%5.1f new %4d retx %4d drop %4d req %4d resp %4d p95 %6.1fms infl %4d good %5.0f | T %.1fms p %.3f %.80s",
				d.T, d.New, d.Retransmits, d.Dropped, d.Requests, d.Responses, d.P95*1000, d.Inflight, d.Goodput, d.Port.ResponseTarget*1000, d.Port.DropProbability, d.Decision.Reason)
		}
	})
	ps, gs := res.Windows(15, 40)
	for i := range ps {
		t.Logf("w %d p %.3f good %.0f", 15+i, ps[i], gs[i])
	}
}
