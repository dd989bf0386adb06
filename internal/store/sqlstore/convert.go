package sqlstore

import (
	"database/sql"
	"encoding/json"
	"time"
)

// Times are BIGINT Unix milliseconds, UTC; absent values are NULL.

func ms(t time.Time) int64 { return t.UTC().UnixMilli() }

func msPtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return ms(*t)
}

func fromMs(v int64) time.Time { return time.UnixMilli(v).UTC() }

func fromNullMs(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMs(v.Int64)
	return &t
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullRaw(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

func rawFrom(v sql.NullString) json.RawMessage {
	if !v.Valid || v.String == "" {
		return nil
	}
	return json.RawMessage(v.String)
}

// jsonText encodes a structured field; nil, empty slices and empty maps are NULL.
func jsonText(v any) any {
	switch x := v.(type) {
	case []string:
		if len(x) == 0 {
			return nil
		}
	case map[string]string:
		if len(x) == 0 {
			return nil
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own plain structs come here
	}
	return string(b)
}

func fromJSON(v sql.NullString, dst any) error {
	if !v.Valid || v.String == "" {
		return nil
	}
	return json.Unmarshal([]byte(v.String), dst)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
