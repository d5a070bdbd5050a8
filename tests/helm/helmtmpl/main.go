// helmtmpl renders a Helm chart as `helm template` does, for machines without
// helm: Go's own text/template, the sprig function library Helm uses, and
// Helm's additions to it, built offline from Debian's packages (golang-go,
// golang-github-masterminds-sprig-dev, golang-k8s-sigs-yaml-dev):
//
//	make build/helmtmpl
//	build/helmtmpl helm/feedfs -f my-values.yaml [--set-json JSON] [--name R] [--namespace NS] [--json]
//	build/helmtmpl --eval TEMPLATE [--data JSON]
//
// # DESIGN
//
// What is Go's and sprig's own (so not ours to get wrong): parsing, trimming,
// truth, scoping, range order, printf, every sprig function. What is ours,
// written after Helm 3's pkg/engine and pkg/chartutil and kept small:
//   - the function map: sprig.TxtFuncMap() without env/expandenv, plus include,
//     tpl, required, fail, toYaml, fromYaml, toJson, fromJson, lookup (an empty
//     map, as `helm template` has no cluster);
//   - values: values.yaml deep-merged with each -f file then --set-json (maps
//     merge, anything else replaces, null deletes a key), read with
//     sigs.k8s.io/yaml so numbers are float64 as in Helm;
//   - the top-level object: .Values, .Release (Name, Namespace, Service "Helm",
//     IsInstall, Revision 1), .Chart (Chart.yaml's fields, capitalized),
//     .Capabilities (KubeVersion, APIVersions.Has), .Template (Name, BasePath);
//   - every file under templates/ parsed into one set (so defines are shared),
//     files starting with "_" not rendered, option missingkey=zero and
//     "<no value>" removed from the output, as Helm does;
//   - errors of fail and required reported as Helm reports them:
//     "execution error at (CHART/templates/FILE:LINE:COL): MESSAGE".
//
// Output: each rendered manifest as `helm template` prints it ("---" then
// "# Source: CHART/templates/FILE"), or with --json one object
// {"templates/FILE": text, ...} (NOTES.txt included) for the tests.
// Exit status 1 with one line "Error: ..." on stderr for any failure.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/template"

	sprig "github.com/Masterminds/sprig"
	"sigs.k8s.io/yaml"
)

// Helm wraps the messages of fail and required in these so that the
// location can be cut out of text/template's long error.
const errStart, errEnd = "HELM_ERR_START", "HELM_ERR_END"

var errWrapped = regexp.MustCompile(errStart + `([\s\S]*)` + errEnd)

func wrap(msg string) string { return errStart + msg + errEnd }

// APIVersions is .Capabilities.APIVersions: a list with a Has method.
type APIVersions []string

func (a APIVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

func toYAML(v interface{}) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return "" // Helm's toYaml swallows the error the same way
	}
	return strings.TrimSuffix(string(b), "\n")
}

func fromYAML(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func toJSON(v interface{}) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

// funcMap is sprig's plus Helm's own; include and tpl need the template set.
func funcMap(t **template.Template) template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	const maxDepth = 1000
	depth := map[string]int{}
	f["toYaml"] = toYAML
	f["fromYaml"] = fromYAML
	f["toJson"] = toJSON
	f["fromJson"] = fromJSON
	f["lookup"] = func(apiVersion, kind, ns, name string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	f["include"] = func(name string, data interface{}) (string, error) {
		if depth[name] >= maxDepth {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		depth[name]++
		defer func() { depth[name]-- }()
		var buf bytes.Buffer
		if err := (*t).ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		c, err := (*t).Clone()
		if err != nil {
			return "", err
		}
		c, err = c.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("cannot parse template %q: %w", text, err)
		}
		var buf bytes.Buffer
		if err := c.Execute(&buf, data); err != nil {
			return "", fmt.Errorf("error during tpl function execution for %q: %w", text, err)
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	f["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return v, errors.New(wrap(msg))
		}
		if s, ok := v.(string); ok && s == "" {
			return v, errors.New(wrap(msg))
		}
		return v, nil
	}
	f["fail"] = func(msg string) (string, error) { return "", errors.New(wrap(msg)) }
	return f
}

// cleanErr turns text/template's "template: NAME:L:C: executing ... error
// calling fail: HELM_ERR_START msg HELM_ERR_END" into Helm's form.
func cleanErr(err error) error {
	var ee template.ExecError
	if !errors.As(err, &ee) {
		return err
	}
	tok := strings.SplitN(err.Error(), ": ", 3)
	if len(tok) != 3 {
		return fmt.Errorf("execution error: %s", err)
	}
	if m := errWrapped.FindStringSubmatch(tok[2]); m != nil {
		return fmt.Errorf("execution error at (%s): %s", tok[1], m[1])
	}
	return err
}

// merge lays over on base: maps merge key by key, a nil deletes, anything
// else replaces (lists included), as Helm coalesces -f files.
func merge(base, over map[string]interface{}) map[string]interface{} {
	out := map[string]interface{}{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if v == nil {
			delete(out, k)
			continue
		}
		bm, ok1 := out[k].(map[string]interface{})
		om, ok2 := v.(map[string]interface{})
		if ok1 && ok2 {
			out[k] = merge(bm, om)
		} else {
			out[k] = v
		}
	}
	return out
}

func readYAML(p string) (map[string]interface{}, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	m := map[string]interface{}{}
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return m, nil
}

// chartMeta is .Chart: Chart.yaml's keys with the first letter upper-cased
// (apiVersion -> APIVersion, as Helm's struct field names).
func chartMeta(raw map[string]interface{}) map[string]interface{} {
	out := map[string]interface{}{}
	for k, v := range raw {
		switch k {
		case "apiVersion":
			k = "APIVersion"
		case "kubeVersion":
			k = "KubeVersion"
		default:
			k = strings.ToUpper(k[:1]) + k[1:]
		}
		out[k] = v
	}
	return out
}

type options struct {
	chart, setJSON, name, namespace, eval, data string
	values                                      []string
	asJSON                                      bool
}

func parseArgs(args []string) (options, error) {
	o := options{name: "release-name", namespace: "default"}
	for i := 0; i < len(args); i++ {
		a := args[i]
		val := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", a)
			}
			i++
			return args[i], nil
		}
		var err error
		switch a {
		case "-f", "--values":
			var v string
			v, err = val()
			o.values = append(o.values, v)
		case "--set-json":
			o.setJSON, err = val()
		case "--name":
			o.name, err = val()
		case "--namespace", "-n":
			o.namespace, err = val()
		case "--eval":
			o.eval, err = val()
		case "--data":
			o.data, err = val()
		case "--json":
			o.asJSON = true
		default:
			if strings.HasPrefix(a, "-") || o.chart != "" {
				return o, fmt.Errorf("unknown argument %q", a)
			}
			o.chart = a
		}
		if err != nil {
			return o, err
		}
	}
	if o.chart == "" && o.eval == "" {
		return o, errors.New("usage: helmtmpl CHART [-f VALUES]... [--set-json JSON] [--name R] [--namespace NS] [--json] | --eval TEMPLATE [--data JSON]")
	}
	return o, nil
}

// evalOne renders one template string against JSON data with the same
// functions: the tests check Helm's additions with it.
func evalOne(o options) (string, error) {
	data := map[string]interface{}{}
	if o.data != "" {
		if err := json.Unmarshal([]byte(o.data), &data); err != nil {
			return "", fmt.Errorf("--data: %w", err)
		}
	}
	var t *template.Template
	t = template.New("eval").Funcs(funcMap(&t)).Option("missingkey=zero")
	if _, err := t.Parse(o.eval); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return "", cleanErr(err)
	}
	return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
}

// render returns {"templates/FILE": text} for every template of the chart
// that is not a partial ("_*").
func render(o options) (map[string]string, error) {
	raw, err := readYAML(filepath.Join(o.chart, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	name, _ := raw["name"].(string)
	if name == "" {
		return nil, errors.New("Chart.yaml has no name")
	}
	vals, err := readYAML(filepath.Join(o.chart, "values.yaml"))
	if err != nil {
		return nil, err
	}
	for _, p := range o.values {
		m, err := readYAML(p)
		if err != nil {
			return nil, err
		}
		vals = merge(vals, m)
	}
	if o.setJSON != "" {
		m := map[string]interface{}{}
		if err := json.Unmarshal([]byte(o.setJSON), &m); err != nil {
			return nil, fmt.Errorf("--set-json: %w", err)
		}
		vals = merge(vals, m)
	}
	top := map[string]interface{}{
		"Values": vals,
		"Chart":  chartMeta(raw),
		"Release": map[string]interface{}{
			"Name": o.name, "Namespace": o.namespace, "Service": "Helm",
			"IsInstall": true, "IsUpgrade": false, "Revision": 1,
		},
		"Capabilities": map[string]interface{}{
			"KubeVersion": map[string]interface{}{"Version": "v1.28.0", "Major": "1", "Minor": "28",
				"GitVersion": "v1.28.0"},
			"APIVersions": APIVersions{"v1", "apps/v1", "storage.k8s.io/v1", "monitoring.coreos.com/v1"},
		},
		"Files": map[string]interface{}{},
	}

	files, err := filepath.Glob(filepath.Join(o.chart, "templates", "*"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var t *template.Template
	t = template.New("gotpl").Funcs(funcMap(&t)).Option("missingkey=zero")
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		tn := path.Join(name, "templates", filepath.Base(f))
		if _, err := t.New(tn).Parse(string(b)); err != nil {
			return nil, fmt.Errorf("parse error at (%s)", strings.TrimPrefix(err.Error(), "template: "))
		}
		if !strings.HasPrefix(filepath.Base(f), "_") {
			names = append(names, tn)
		}
	}
	out := map[string]string{}
	for _, tn := range names {
		v := merge(top, map[string]interface{}{})
		v["Template"] = map[string]interface{}{"Name": tn, "BasePath": path.Join(name, "templates")}
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, tn, v); err != nil {
			return nil, cleanErr(err)
		}
		out[strings.TrimPrefix(tn, name+"/")] = strings.ReplaceAll(buf.String(), "<no value>", "")
	}
	return out, nil
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

func main() {
	o, err := parseArgs(os.Args[1:])
	if err == nil && o.eval != "" {
		var s string
		if s, err = evalOne(o); err == nil {
			fmt.Print(s)
			return
		}
	}
	var out map[string]string
	if err == nil {
		out, err = render(o)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
	if o.asJSON {
		b, _ := json.MarshalIndent(out, "", " ")
		fmt.Println(string(b))
		return
	}
	keys := make([]string, 0, len(out))
	for k := range out {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	chartName := filepath.Base(filepath.Clean(o.chart))
	for _, k := range keys {
		if strings.HasSuffix(k, "NOTES.txt") {
			continue
		}
		for _, doc := range docSep.Split(out[k], -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			fmt.Printf("---\n# Source: %s/%s\n%s\n", chartName, k, strings.Trim(doc, "\n"))
		}
	}
}
