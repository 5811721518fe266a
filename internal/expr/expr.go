// Package expr compiles and evaluates the CEL expressions of flows (entity,
// version, state, conditions and request mappings). Expressions are compiled
// once at config load, so a typo is a start-up error with file:line, never a
// runtime surprise.
package expr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"
	"google.golang.org/protobuf/types/known/structpb"
)

// The variables every expression may use. Those a stage cannot know yet
// are null (for example object before a refetch, state before it is
// computed).
const (
	VarEvent    = "event"    // the event's JSON body
	VarMeta     = "meta"     // source, event_id, type, occurred_at, received_at, ...
	VarEntity   = "entity"   // the flow's entity id
	VarVersion  = "version"  // the business version being applied
	VarState    = "state"    // the new projected state
	VarPrevious = "previous" // the previously applied state (null at first)
	VarObject   = "object"   // the refetched authoritative object

	// Delivery: a destination's lookup and classification rules.
	VarEpisodeKey = "episode_key" // the effect's episode key
	// VarIdempotencyKey is the key sent in the destination's idempotency
	// header (the episode key, or its hashed form), empty without one.
	VarIdempotencyKey = "idempotency_key"
	VarEffect         = "effect"  // the effect's name
	VarRequest        = "request" // the stored request (method, path, headers, body)
	VarStatus         = "status"  // the answer's HTTP status
	VarHeaders        = "headers" // the answer's headers (lower-case names)
	VarBody           = "body"    // the answer's JSON body, or its text

	// Compensation: the effect being compensated (its stored request,
	// destination reference, episode key, ...), in an effect's
	// compensate_when and compensation request.
	VarOriginal = "original"
)

var varNames = []string{VarEvent, VarMeta, VarEntity, VarVersion, VarState, VarPrevious, VarObject,
	VarEpisodeKey, VarIdempotencyKey, VarEffect, VarRequest, VarStatus, VarHeaders, VarBody, VarOriginal}

// Vars binds variables for one evaluation; missing ones are null.
//
// Vars is CEL's activation itself (ResolveName, Parent), so that an
// evaluation reads the caller's map: it used to copy every variable into
// a fresh map per evaluation, a twelfth of the bytes a webhook allocates
// on its way through the pipeline.
type Vars map[string]any

// declared is varNames as a set.
var declared = func() map[string]bool {
	m := make(map[string]bool, len(varNames))
	for _, v := range varNames {
		m[v] = true
	}
	return m
}()

// ResolveName is a variable's value; a declared variable v does not bind
// is null.
func (v Vars) ResolveName(name string) (any, bool) {
	if x, ok := v[name]; ok {
		return x, true
	}
	return nil, declared[name]
}

// Parent is nil: Vars is the only scope.
func (Vars) Parent() interpreter.Activation { return nil }

var _ interpreter.Activation = Vars(nil)

var (
	envOnce sync.Once
	envVal  *cel.Env
	envErr  error
)

// env is shared: a CEL environment is immutable and safe for concurrent use.
func env() (*cel.Env, error) {
	envOnce.Do(func() {
		opts := []cel.EnvOption{ext.Strings(), ext.Encoders(), ext.Math(),
			escaper("pathEscape", url.PathEscape), escaper("queryEscape", url.QueryEscape)}
		for _, v := range varNames {
			opts = append(opts, cel.Variable(v, cel.DynType))
		}
		envVal, envErr = cel.NewEnv(opts...)
	})
	return envVal, envErr
}

// escaper declares a function that escapes a string, or an integer's
// decimal form, for one part of a URL: pathEscape(s) makes s one path
// segment ("a/b?c" -> "a%2Fb%3Fc"), queryEscape(s) one query component
// ("a&b=c d" -> "a%26b%3Dc+d"). Payload data concatenated into a path
// unescaped could climb out of it or add query parameters.
func escaper(name string, escape func(string) string) cel.EnvOption {
	return cel.Function(name,
		cel.Overload(name+"_string", []*cel.Type{cel.StringType}, cel.StringType,
			cel.UnaryBinding(func(v ref.Val) ref.Val { return types.String(escape(string(v.(types.String)))) })),
		cel.Overload(name+"_int", []*cel.Type{cel.IntType}, cel.StringType,
			cel.UnaryBinding(func(v ref.Val) ref.Val { return types.String(strconv.FormatInt(int64(v.(types.Int)), 10)) })),
		cel.Overload(name+"_uint", []*cel.Type{cel.UintType}, cel.StringType,
			cel.UnaryBinding(func(v ref.Val) ref.Val { return types.String(strconv.FormatUint(uint64(v.(types.Uint)), 10)) })),
	)
}

// Program is one compiled expression.
type Program struct {
	Source string
	prg    cel.Program
	refs   []string
	lits   []string
}

// Compile parses and checks src.
func Compile(src string) (*Program, error) {
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("empty expression")
	}
	e, err := env()
	if err != nil {
		return nil, fmt.Errorf("cel environment: %w", err)
	}
	ast, iss := e.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("%s", strings.ReplaceAll(iss.Err().Error(), "\n", " "))
	}
	prg, err := e.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.CostLimit(1_000_000))
	if err != nil {
		return nil, fmt.Errorf("plan expression: %w", err)
	}
	native := ast.NativeRep()
	p := &Program{Source: src, prg: prg, refs: references(native)}
	concatLiterals(native.Expr(), &p.lits)
	return p, nil
}

// Constant reports whether the program reads no variable, so that its one
// value can be computed (and checked) when the config loads.
func (p *Program) Constant() bool { return len(p.refs) == 0 }

// ConcatLiterals lists the string literals the result is concatenated
// from: for `"/deals/" + entity + "?x=1"`, "/deals/" and "?x=1"; for a
// lone literal, that literal. Literals inside function calls are not
// parts of the result and are left out.
func (p *Program) ConcatLiterals() []string { return p.lits }

func concatLiterals(e celast.Expr, out *[]string) {
	switch e.Kind() {
	case celast.LiteralKind:
		if s, ok := e.AsLiteral().(types.String); ok {
			*out = append(*out, string(s))
		}
	case celast.CallKind:
		if c := e.AsCall(); c.FunctionName() == operators.Add && !c.IsMemberFunction() {
			for _, a := range c.Args() {
				concatLiterals(a, out)
			}
		}
	}
}

// References lists the variables and dotted field selections the program
// reads, such as "meta.received_at" and "event", sorted.
func (p *Program) References() []string { return p.refs }

// Reads reports whether the program reads path ("meta.received_at") or
// anything below it.
func (p *Program) Reads(path string) bool {
	for _, r := range p.refs {
		if r == path || strings.HasPrefix(r, path+".") {
			return true
		}
	}
	return false
}

func references(a *celast.AST) []string {
	seen := map[string]bool{}
	celast.PostOrderVisit(a.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if path, ok := dotted(e); ok {
			seen[path] = true
		}
	}))
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// dotted renders ident or ident.a.b selections; index access stops the path.
func dotted(e celast.Expr) (string, bool) {
	switch e.Kind() {
	case celast.IdentKind:
		return e.AsIdent(), true
	case celast.SelectKind:
		s := e.AsSelect()
		base, ok := dotted(s.Operand())
		if !ok {
			return "", false
		}
		return base + "." + s.FieldName(), true
	}
	return "", false
}

// Eval runs the program and returns its result as a JSON-shaped Go value
// (nil, bool, int64, float64, string, []any, map[string]any).
func (p *Program) Eval(vars Vars) (any, error) {
	out, _, err := p.prg.Eval(vars)
	if err != nil {
		return nil, fmt.Errorf("evaluate %q: %w", p.Source, err)
	}
	return native(out)
}

// EvalString requires a string (numbers are formatted, so an entity may be
// a numeric id such as HubSpot's objectId).
func (p *Program) EvalString(vars Vars) (string, error) {
	v, err := p.Eval(vars)
	if err != nil {
		return "", err
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case int64:
		return fmt.Sprint(x), nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return fmt.Sprintf("%.0f", x), nil
		}
	}
	return "", fmt.Errorf("evaluate %q: want a string, got %s", p.Source, kind(v))
}

// EvalBool requires a boolean.
func (p *Program) EvalBool(vars Vars) (bool, error) {
	v, err := p.Eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("evaluate %q: want a boolean, got %s", p.Source, kind(v))
	}
	return b, nil
}

// EvalInt requires an integer (an integral double or a decimal string is
// accepted, since JSON senders are loose about numbers).
func (p *Program) EvalInt(vars Vars) (int64, error) {
	v, err := p.Eval(vars)
	if err != nil {
		return 0, err
	}
	switch x := v.(type) {
	case int64:
		return x, nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x), nil
		}
	case string:
		var n json.Number = json.Number(strings.TrimSpace(x))
		if i, err := n.Int64(); err == nil {
			return i, nil
		}
	}
	return 0, fmt.Errorf("evaluate %q: want an integer, got %s", p.Source, kind(v))
}

// EvalQuery requires a map of query parameters: string keys, and values
// that are strings, numbers, booleans, null (the parameter is left out) or
// lists of those (the parameter repeats). The caller escapes keys and
// values when it encodes them; null as a whole means no parameters.
func (p *Program) EvalQuery(vars Vars) (url.Values, error) {
	v, err := p.Eval(vars)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("evaluate %q: want a map of query parameters, got %s", p.Source, kind(v))
	}
	q := url.Values{}
	for k, v := range m {
		if k == "" {
			return nil, fmt.Errorf("evaluate %q: a query parameter has an empty name", p.Source)
		}
		vs, isList := v.([]any)
		if !isList {
			vs = []any{v}
		}
		for _, v := range vs {
			s, err := queryValue(v)
			if err != nil {
				return nil, fmt.Errorf("evaluate %q: query parameter %q: %w", p.Source, k, err)
			}
			if v != nil {
				q.Add(k, s)
			}
		}
	}
	if len(q) == 0 {
		return nil, nil
	}
	return q, nil
}

func queryValue(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	}
	return "", fmt.Errorf("want a string, number, boolean, null or a list of those, got %s", kind(v))
}

// EvalJSON evaluates to canonical JSON (sorted keys, no spaces), the form
// in which states are compared for equality.
func (p *Program) EvalJSON(vars Vars) (json.RawMessage, error) {
	v, err := p.Eval(vars)
	if err != nil {
		return nil, err
	}
	return Canonical(v)
}

// Canonical marshals a JSON-shaped value with sorted keys and no spaces.
func Canonical(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode JSON: %w", err)
	}
	return json.RawMessage(bytes.TrimRight(buf.Bytes(), "\n")), nil
}

func kind(v any) string {
	if v == nil {
		return "null"
	}
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	}
	return reflect.TypeOf(v).String()
}

var structValueType = reflect.TypeOf(&structpb.Value{})

// native converts a CEL value into a JSON-shaped Go value.
func native(v ref.Val) (any, error) {
	switch v.Type() {
	case types.NullType:
		return nil, nil
	case types.BoolType:
		return v.Value().(bool), nil
	case types.IntType:
		return v.Value().(int64), nil
	case types.UintType:
		u := v.Value().(uint64)
		if u > math.MaxInt64 {
			return float64(u), nil
		}
		return int64(u), nil
	case types.DoubleType:
		f := v.Value().(float64)
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("result is %v, which JSON cannot represent", f)
		}
		return f, nil
	case types.StringType:
		return v.Value().(string), nil
	case types.MapType:
		return nativeMap(v)
	case types.ListType:
		return nativeList(v)
	}
	// Timestamps, durations and bytes go through the JSON value
	// conversion CEL defines for them (RFC 3339 text, seconds, base64).
	pv, err := v.ConvertToNative(structValueType)
	if err != nil {
		return nil, fmt.Errorf("result of type %s cannot be represented as JSON", v.Type().TypeName())
	}
	return fromStruct(pv.(*structpb.Value))
}

// nativeMap converts a map member by member with native, so that its
// numbers stay what they are: CEL's own JSON conversion writes an integer
// beyond 2^53 as a string, and a state holding {"id": 9007199254740993}
// would reach a destination as {"id": "9007199254740993"}.
func nativeMap(v ref.Val) (any, error) {
	m, ok := v.(traits.Mapper)
	if !ok {
		return nil, fmt.Errorf("result of type %s cannot be represented as JSON", v.Type().TypeName())
	}
	out := map[string]any{}
	for it := m.Iterator(); it.HasNext() == types.True; {
		k := it.Next()
		key, ok := k.Value().(string)
		if !ok || k.Type() != types.StringType {
			return nil, fmt.Errorf("result holds a map key of type %s; JSON keys are strings", k.Type().TypeName())
		}
		e, err := native(m.Get(k))
		if err != nil {
			return nil, err
		}
		out[key] = e
	}
	return out, nil
}

// nativeList converts a list element by element with native.
func nativeList(v ref.Val) (any, error) {
	l, ok := v.(traits.Lister)
	if !ok {
		return nil, fmt.Errorf("result of type %s cannot be represented as JSON", v.Type().TypeName())
	}
	n, ok := l.Size().(types.Int)
	if !ok {
		return nil, fmt.Errorf("result of type %s cannot be represented as JSON", v.Type().TypeName())
	}
	out := make([]any, 0, int(n))
	for i := types.Int(0); i < n; i++ {
		e, err := native(l.Get(i))
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// fromStruct is structpb's AsInterface with its numbers normalized: an
// integral float64 becomes int64, so 3 stays 3 and not 3.0 in states and
// requests. A number that is not finite is an error, where AsInterface
// gives the strings "Infinity" and "NaN": a state must never carry a
// value nobody computed.
func fromStruct(v *structpb.Value) (any, error) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		x := k.NumberValue
		switch {
		case math.IsInf(x, 0) || math.IsNaN(x):
			return nil, fmt.Errorf("result holds %v, which JSON cannot represent", x)
		case x == math.Trunc(x) && math.Abs(x) < 1<<53:
			return int64(x), nil
		}
		return x, nil
	case *structpb.Value_ListValue:
		out := make([]any, len(k.ListValue.GetValues()))
		for i, e := range k.ListValue.GetValues() {
			var err error
			if out[i], err = fromStruct(e); err != nil {
				return nil, err
			}
		}
		return out, nil
	case *structpb.Value_StructValue:
		out := make(map[string]any, len(k.StructValue.GetFields()))
		for name, e := range k.StructValue.GetFields() {
			var err error
			if out[name], err = fromStruct(e); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return v.AsInterface(), nil
}
