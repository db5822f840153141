package doctor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

func loadSchema(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func resolve(root, node map[string]any) map[string]any {
	if ref, ok := node["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/$defs/")
		return root["$defs"].(map[string]any)[name].(map[string]any)
	}
	return node
}

// validate is a small JSON Schema checker for the keywords schema.json
// uses: $ref, type, properties, required, items, additionalProperties,
// enum, const, pattern.
func validate(root, node map[string]any, v any, path string) []string {
	node = resolve(root, node)
	var errs []string
	if c, ok := node["const"]; ok && !reflect.DeepEqual(c, v) {
		errs = append(errs, fmt.Sprintf("%s: %v is not %v", path, v, c))
	}
	if e, ok := node["enum"].([]any); ok && !slices.ContainsFunc(e, func(x any) bool { return reflect.DeepEqual(x, v) }) {
		errs = append(errs, fmt.Sprintf("%s: %v not in %v", path, v, e))
	}
	if ty, ok := node["type"]; ok {
		var types []string
		switch ty := ty.(type) {
		case string:
			types = []string{ty}
		case []any:
			for _, x := range ty {
				types = append(types, x.(string))
			}
		}
		if !slices.Contains(types, jsonType(v)) && !(jsonType(v) == "integer" && slices.Contains(types, "number")) {
			errs = append(errs, fmt.Sprintf("%s: %s, want %v", path, jsonType(v), types))
			return errs
		}
	}
	if p, ok := node["pattern"].(string); ok {
		if s, isStr := v.(string); isStr && !regexp.MustCompile(p).MatchString(s) {
			errs = append(errs, fmt.Sprintf("%s: %q does not match %s", path, s, p))
		}
	}
	switch v := v.(type) {
	case map[string]any:
		props, _ := node["properties"].(map[string]any)
		for _, r := range asStrings(node["required"]) {
			if _, ok := v[r]; !ok {
				errs = append(errs, fmt.Sprintf("%s: %q required", path, r))
			}
		}
		for k, x := range v {
			if sub, ok := props[k].(map[string]any); ok {
				errs = append(errs, validate(root, sub, x, path+"."+k)...)
			} else if add, ok := node["additionalProperties"].(map[string]any); ok {
				errs = append(errs, validate(root, add, x, path+"."+k)...)
			} else if props != nil {
				errs = append(errs, fmt.Sprintf("%s: %q is not in the schema", path, k))
			}
		}
	case []any:
		if items, ok := node["items"].(map[string]any); ok {
			for i, x := range v {
				errs = append(errs, validate(root, items, x, fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	}
	return errs
}

func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case float64:
		if v == float64(int64(v)) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "?"
}

func asStrings(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, x := range l {
			out = append(out, x.(string))
		}
	}
	return out
}

// Every report the doctor writes conforms to the published schema.
func TestReportsMatchSchema(t *testing.T) {
	root := loadSchema(t)
	entries, _ := os.ReadDir("testdata")
	for _, e := range entries {
		t.Run(e.Name(), func(t *testing.T) {
			var buf bytes.Buffer
			Judge(load(t, e.Name()), nil).WriteJSON(&buf)
			var v any
			json.Unmarshal(buf.Bytes(), &v)
			for _, err := range validate(root, root, v, "$") {
				t.Error(err)
			}
		})
	}
	var buf bytes.Buffer
	Judge(&Facts{}, nil).WriteJSON(&buf)
	var v any
	json.Unmarshal(buf.Bytes(), &v)
	for _, err := range validate(root, root, v, "$") {
		t.Errorf("empty facts: %s", err)
	}
}

// The schema lists exactly the fields the Go types write, no more, no less.
func TestSchemaMatchesTypes(t *testing.T) {
	root := loadSchema(t)
	seen := map[reflect.Type]bool{}
	var walk func(ty reflect.Type, node map[string]any, path string)
	walk = func(ty reflect.Type, node map[string]any, path string) {
		node = resolve(root, node)
		for ty.Kind() == reflect.Pointer {
			ty = ty.Elem()
		}
		switch ty.Kind() {
		case reflect.Slice:
			if items, ok := node["items"].(map[string]any); ok {
				walk(ty.Elem(), items, path+"[]")
			}
			return
		case reflect.Map:
			if add, ok := node["additionalProperties"].(map[string]any); ok {
				walk(ty.Elem(), add, path+"{}")
			}
			return
		case reflect.Struct:
		default:
			return
		}
		if seen[ty] {
			return
		}
		seen[ty] = true
		props, _ := node["properties"].(map[string]any)
		var goNames, schemaNames []string
		for i := range ty.NumField() {
			f := ty.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			goNames = append(goNames, name)
			if sub, ok := props[name].(map[string]any); ok {
				walk(f.Type, sub, path+"."+name)
			}
		}
		for k := range props {
			schemaNames = append(schemaNames, k)
		}
		sort.Strings(goNames)
		sort.Strings(schemaNames)
		if !slices.Equal(goNames, schemaNames) {
			t.Errorf("%s (%s): Go writes %v, schema lists %v", path, ty.Name(), goNames, schemaNames)
		}
	}
	walk(reflect.TypeOf(Report{}), root, "$")
	if len(seen) < 15 {
		t.Errorf("walked only %d types", len(seen))
	}
}

// SCHEMA.md documents every rule of the knowledge base.
func TestSchemaDocListsEveryRule(t *testing.T) {
	doc, err := os.ReadFile("SCHEMA.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range DefaultKB().Rules {
		if !strings.Contains(string(doc), "`"+r.ID+"`") {
			t.Errorf("SCHEMA.md does not document rule %s", r.ID)
		}
	}
	for _, c := range DefaultKB().Checks {
		if !strings.Contains(string(doc), "`"+c.ID+"`") {
			t.Errorf("SCHEMA.md does not name check %s", c.ID)
		}
	}
}
