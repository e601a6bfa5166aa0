package evidence

import (
	"strings"
	"testing"

	"github.com/volume-agent/volume-agent/internal/reclaim"
)

func TestStep(t *testing.T) {
	a, b := Owner{UID: "uid-a"}, Owner{UID: "uid-b"}
	releasedDelete := Live{Released: true, Delete: true, Claim: a, ReleasedBy: a}
	for _, tc := range []struct {
		name string
		step reclaim.Step
		live Live
		use  Use
		why  string // a part of the reason, for Refuse
	}{
		// The live state alone permits reclaiming, whatever was recorded.
		{name: "released, Delete, nothing recorded", step: reclaim.Released, live: releasedDelete, use: Reclaim},
		{name: "released, Delete, aside", step: reclaim.Aside, live: releasedDelete, use: Reclaim},
		{name: "released, Delete, deleting", step: reclaim.Deleting, live: releasedDelete, use: Reclaim},
		{name: "released, Delete, releasing claim not recorded", step: reclaim.Deleting,
			live: Live{Released: true, Delete: true, Claim: a}, use: Reclaim},

		// Deleting is acted on only while Released with policy Delete.
		{name: "deleting, bound", step: reclaim.Deleting, live: Live{Delete: true, Claim: a},
			use: Refuse, why: "is not Released"},
		{name: "deleting, bound, Retain", step: reclaim.Deleting, live: Live{Claim: a},
			use: Refuse, why: "is not Released (its claim exists, or it names none) and has a reclaim policy other than Delete"},
		{name: "deleting, released, Retain", step: reclaim.Deleting, live: Live{Released: true, Claim: a, ReleasedBy: a},
			use: Refuse, why: "has a reclaim policy other than Delete: a recorded step is acted on only while"},

		// Aside storage goes back only to the claim that released it.
		{name: "aside, released, Retain, same claim", step: reclaim.Aside, live: Live{Released: true, Claim: a, ReleasedBy: a},
			use: GiveBack},
		{name: "aside, the same claim back", step: reclaim.Aside, live: Live{Delete: true, Claim: a, ReleasedBy: a},
			use: GiveBack},
		{name: "aside, bound to another claim", step: reclaim.Aside, live: Live{Delete: true, Claim: b, ReleasedBy: a},
			use: Refuse, why: "bound now to the claim of UID uid-b, not to the claim that released it (UID uid-a)"},
		{name: "aside, claimRef cleared", step: reclaim.Aside, live: Live{Delete: true, ReleasedBy: a},
			use: Refuse, why: "names no claim now"},
		{name: "aside, releasing claim not recorded", step: reclaim.Aside, live: Live{Released: true, Claim: a},
			use: Refuse, why: "the claim that released it is not recorded"},
		{name: "aside, neither known", step: reclaim.Aside, live: Live{},
			use: Refuse, why: "not recorded"},
		{name: "aside, the same UID with another nonce", step: reclaim.Aside,
			live: Live{Claim: Owner{UID: "u", Nonce: "1"}, ReleasedBy: Owner{UID: "u", Nonce: "2"}},
			use:  Refuse, why: "not to the claim that released it"},

		// Nothing recorded, or a step not known: nothing is done.
		{name: "nothing recorded, bound", step: reclaim.Released, live: Live{Delete: true, Claim: a},
			use: Refuse, why: "nothing to reclaim"},
		{name: "unknown step", step: "Shredding", live: Live{Claim: a}, use: Refuse, why: `unknown reclaim step "Shredding"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Step(tc.step, tc.live)
			if v.Use != tc.use || !strings.Contains(v.Why, tc.why) || (v.Use != Refuse && v.Why != "") || (v.Use == Refuse && v.Why == "") {
				t.Fatalf("Step(%q, %+v) = %+v, want %s with a reason containing %q", tc.step, tc.live, v, tc.use, tc.why)
			}
		})
	}
}
