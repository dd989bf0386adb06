package bases

import "testing"

func TestBases(t *testing.T) {
	bs := List()
	if len(bs) != 4 || bs[0].Name != "lbb/python" || bs[3].Name != "lbb/code-interpreter" || bs[3].Context != "python" {
		t.Fatalf("List = %+v", bs)
	}
	bs[0].Name = "changed"
	if List()[0].Name != "lbb/python" {
		t.Error("List hands out its own slice")
	}
	for name, lang := range map[string]string{"lbb/python": "python", "lbb/node": "node", "lbb/shell": "shell", "node": "node", "python": "python", "lbb/code-interpreter": "python"} {
		if b, ok := Lookup(name); !ok || b.Language != lang {
			t.Errorf("Lookup(%q) = %+v, %v", name, b, ok)
		}
	}
	if _, ok := Lookup("lbb/ruby"); ok {
		t.Error("Lookup found lbb/ruby")
	}
}
