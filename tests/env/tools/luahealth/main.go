// luahealth: runs Argo CD resource-customization health scripts the way Argo CD runs them, with
// github.com/yuin/gopher-lua (the interpreter Argo CD embeds) and Argo CD's sandbox (only the
// package, base and table libraries; `obj` decoded from the object's JSON as Argo CD's
// util/lua.decodeValue does; a table returned, its `status` one of Argo CD's health codes). The
// tests use it on our scripts in deploy/argocd and on live objects. Built by tests/env/k8s-bin.sh;
// never part of the product.
//
//	luahealth --version
//	luahealth run SCRIPT < object.json     prints "<status> <message>"
//	luahealth test DIR                     runs every DIR/<group>/<Kind>/health_test.yaml
//	                                       (Argo CD's layout: health.lua, testdata/*.yaml)
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	lua "github.com/yuin/gopher-lua"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

var version = "dev"

type healthStatus struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

type healthTests struct {
	Tests []struct {
		HealthStatus healthStatus `json:"healthStatus"`
		InputPath    string       `json:"inputPath"`
	} `json:"tests"`
}

// decodeValue as Argo CD's util/lua/lua.go has it.
func decodeValue(L *lua.LState, value interface{}) lua.LValue {
	switch converted := value.(type) {
	case bool:
		return lua.LBool(converted)
	case float64:
		return lua.LNumber(converted)
	case string:
		return lua.LString(converted)
	case int64:
		return lua.LNumber(converted)
	case int:
		return lua.LNumber(converted)
	case []interface{}:
		arr := L.CreateTable(len(converted), 0)
		for _, item := range converted {
			arr.Append(decodeValue(L, item))
		}
		return arr
	case map[string]interface{}:
		tbl := L.CreateTable(0, len(converted))
		for key, item := range converted {
			tbl.RawSetH(lua.LString(key), decodeValue(L, item))
		}
		return tbl
	}
	return lua.LNil
}

func run(obj map[string]interface{}, script string) (healthStatus, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, pair := range []struct {
		n string
		f lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(pair.f), NRet: 0, Protect: true}, lua.LString(pair.n)); err != nil {
			return healthStatus{}, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", decodeValue(l, obj))
	if err := l.DoString(script); err != nil {
		return healthStatus{}, err
	}
	ret := l.Get(-1)
	tbl, ok := ret.(*lua.LTable)
	if !ok {
		return healthStatus{}, fmt.Errorf("expect table output from Lua script, not %s", ret.Type().String())
	}
	hs := healthStatus{}
	if s, ok := tbl.RawGetString("status").(lua.LString); ok {
		hs.Status = string(s)
	}
	if m, ok := tbl.RawGetString("message").(lua.LString); ok {
		hs.Message = string(m)
	}
	switch hs.Status {
	case "Unknown", "Progressing", "Suspended", "Healthy", "Degraded", "Missing":
	default:
		return healthStatus{Status: "Unknown", Message: "Lua returned an invalid health status"}, nil
	}
	return hs, nil
}

func decodeFile(path string) (map[string]interface{}, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	j, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, err
	}
	var obj map[string]interface{}
	err = utiljson.Unmarshal(j, &obj)
	return obj, err
}

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "luahealth: "+format+"\n", a...)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 2 {
		fail("usage: luahealth --version | run SCRIPT < object.json | test DIR")
	}
	switch os.Args[1] {
	case "--version":
		fmt.Println("luahealth", version)
	case "run":
		script, err := os.ReadFile(os.Args[2])
		if err != nil {
			fail("%v", err)
		}
		raw, err := os.ReadFile("/dev/stdin")
		if err != nil {
			fail("reading stdin: %v", err)
		}
		var obj map[string]interface{}
		if err := utiljson.Unmarshal(raw, &obj); err != nil {
			fail("not a JSON object: %v", err)
		}
		hs, err := run(obj, string(script))
		if err != nil {
			fail("%v", err)
		}
		fmt.Printf("%s %s\n", hs.Status, hs.Message)
	case "test":
		tests, _ := filepath.Glob(filepath.Join(os.Args[2], "*", "*", "health_test.yaml"))
		if len(tests) == 0 {
			fail("no health_test.yaml under %s", os.Args[2])
		}
		failed, cases := 0, 0
		for _, t := range tests {
			dir := filepath.Dir(t)
			script, err := os.ReadFile(filepath.Join(dir, "health.lua"))
			if err != nil {
				fail("%v", err)
			}
			raw, err := os.ReadFile(t)
			if err != nil {
				fail("%v", err)
			}
			var ht healthTests
			if err := yaml.UnmarshalStrict(raw, &ht); err != nil {
				fail("%s: %v", t, err)
			}
			if len(ht.Tests) == 0 {
				fail("%s: no tests", t)
			}
			for _, c := range ht.Tests {
				cases++
				obj, err := decodeFile(filepath.Join(dir, c.InputPath))
				if err != nil {
					fail("%s: %s: %v", t, c.InputPath, err)
				}
				got, err := run(obj, string(script))
				if err != nil {
					fmt.Printf("FAIL %s %s: %v\n", dir, c.InputPath, err)
					failed++
				} else if got != c.HealthStatus {
					fmt.Printf("FAIL %s %s: got %+v, want %+v\n", dir, c.InputPath, got, c.HealthStatus)
					failed++
				} else {
					fmt.Printf("ok %s %s: %s\n", dir, c.InputPath, got.Status)
				}
			}
		}
		fmt.Printf("%d cases, %d failed\n", cases, failed)
		if failed > 0 {
			os.Exit(1)
		}
	default:
		fail("unknown command %q", os.Args[1])
	}
}
