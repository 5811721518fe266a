package deliver

import "testing"

// A create answer's Location and the bare id a lookup reads name the same
// object; anything else is another object.
func TestSameRef(t *testing.T) {
	for _, tc := range []struct {
		looked, recorded string
		want             bool
	}{
		{"obj_1", "obj_1", true},
		{"41208", "https://crm.example/api/deals/41208", true},
		{"/deals/41208", "41208", true},
		{"41208", "https://crm.example/api/deals/141208", false},
		{"obj_2", "obj_1", false},
		{"8", "https://crm.example/api/deals/41208", false},
	} {
		if got := sameRef(tc.looked, tc.recorded); got != tc.want {
			t.Errorf("sameRef(%q, %q) = %v, want %v", tc.looked, tc.recorded, got, tc.want)
		}
	}
}
