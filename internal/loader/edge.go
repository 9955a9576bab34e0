package loader

import (
	"fmt"
	"math"

	"github.com/olcd/olcd/internal/olc"
)

// The map edge: olc's values are the C enums' of bpf/olcd.h, so the
// conversion to the map structs' fields is a narrowing of a checked value.
// The blank function below fails to compile when an olc constant and its
// enum disagree (an index out of range, or a constant overflow for a
// negative difference), the way stringer checks its tables.
func _() {
	var x [1]struct{}
	_ = x[olc.ModeOff-olc.Mode(olcdOlcdModeOLCD_MODE_OFF)]
	_ = x[olc.ModeObserve-olc.Mode(olcdOlcdModeOLCD_MODE_OBSERVE)]
	_ = x[olc.ModeEnforce-olc.Mode(olcdOlcdModeOLCD_MODE_ENFORCE)]
	_ = x[olc.ActionDrop-olc.Action(olcdOlcdActionOLCD_ACTION_DROP)]
	_ = x[olc.ActionMark-olc.Action(olcdOlcdActionOLCD_ACTION_MARK)]
	_ = x[olc.ActionReject-olc.Action(olcdOlcdActionOLCD_ACTION_REJECT)]
	_ = x[olc.ClassCritical-olc.Class(olcdOlcdClassOLCD_CLASS_CRITICAL)]
	_ = x[olc.ClassNormal-olc.Class(olcdOlcdClassOLCD_CLASS_NORMAL)]
	_ = x[olc.ClassBestEffort-olc.Class(olcdOlcdClassOLCD_CLASS_BEST_EFFORT)]
	_ = x[olc.ProtoTCP-olc.Proto(olcdOlcdProtoOLCD_PROTO_TCP)]
	_ = x[olc.ProtoUDP-olc.Proto(olcdOlcdProtoOLCD_PROTO_UDP)]
	// Policy indices are 16 bits; 0 is "no policy", one counts the rest.
	_ = x[olc.MaxMaxPorts-(math.MaxUint16-1)]
}

// checkKey refuses a port key the datapath has no index for.
func checkKey(k olc.PortKey) error {
	if !k.Proto.Valid() {
		return fmt.Errorf("port %s: protocol must be tcp (6) or udp (17)", k)
	}
	return nil
}

// cMode, cAction and cClass are the map structs' u8 fields of valid
// values (SetPolicies and SetMode check them first).
func cMode(m olc.Mode) uint8     { return uint8(olcdOlcdMode(m)) }
func cAction(a olc.Action) uint8 { return uint8(olcdOlcdAction(a)) }
func cClass(c olc.Class) uint8   { return uint8(olcdOlcdClass(c)) }
