package lint

import (
	"encoding/json"
	"io"
	"net/url"
	"path/filepath"
	"strings"
)

// SARIF 2.1.0 output, the subset code-scanning services read: the rules in
// tool.driver.rules and one result per finding with a physical location in
// the inventory. Input errors become tool execution notifications.

const (
	sarifVersion = "2.1.0"
	sarifSchema  = "https://raw.githubusercontent.com/oasis-tcs/sarif-spec/master/Schemata/sarif-schema-2.1.0.json"
)

type sarifLog struct {
	Schema  string     `json:"$schema"`
	Version string     `json:"version"`
	Runs    []sarifRun `json:"runs"`
}

type sarifRun struct {
	Tool        sarifTool          `json:"tool"`
	Invocations []sarifInvocation  `json:"invocations"`
	Results     []sarifResult      `json:"results"`
	Artifacts   []sarifArtifact    `json:"artifacts,omitempty"`
	Properties  map[string]Summary `json:"properties,omitempty"`
}

type sarifTool struct {
	Driver sarifDriver `json:"driver"`
}

type sarifDriver struct {
	Name    string      `json:"name"`
	Version string      `json:"version,omitempty"`
	Rules   []sarifRule `json:"rules"`
}

type sarifRule struct {
	ID                   string        `json:"id"`
	ShortDescription     sarifText     `json:"shortDescription"`
	FullDescription      sarifText     `json:"fullDescription"`
	Help                 sarifText     `json:"help"`
	DefaultConfiguration sarifRuleConf `json:"defaultConfiguration"`
}

type sarifRuleConf struct {
	Level string `json:"level"`
}

type sarifText struct {
	Text string `json:"text"`
}

type sarifResult struct {
	RuleID     string            `json:"ruleId"`
	RuleIndex  int               `json:"ruleIndex"`
	Level      string            `json:"level"`
	Message    sarifText         `json:"message"`
	Locations  []sarifLocation   `json:"locations,omitempty"`
	Properties map[string]string `json:"properties"`
}

type sarifLocation struct {
	PhysicalLocation sarifPhysical `json:"physicalLocation"`
}

type sarifPhysical struct {
	ArtifactLocation sarifArtifactLocation `json:"artifactLocation"`
	Region           *sarifRegion          `json:"region,omitempty"`
}

type sarifArtifactLocation struct {
	URI string `json:"uri"`
}

type sarifRegion struct {
	StartLine int `json:"startLine"`
}

type sarifArtifact struct {
	Location sarifArtifactLocation `json:"location"`
}

type sarifInvocation struct {
	ExecutionSuccessful        bool                `json:"executionSuccessful"`
	ToolExecutionNotifications []sarifNotification `json:"toolExecutionNotifications,omitempty"`
}

type sarifNotification struct {
	Level     string          `json:"level"`
	Message   sarifText       `json:"message"`
	Locations []sarifLocation `json:"locations,omitempty"`
}

// sarifLevel maps a finding level to a SARIF level. PASS findings are kept
// as notes so that the SARIF log carries the same findings and counts as the
// other formats; their properties.level says PASS, for filtering.
func sarifLevel(l Level) string {
	switch l {
	case fail:
		return "error"
	case warn:
		return "warning"
	}
	return "note"
}

func writeSARIF(w io.Writer, rep *Report, toolVersion string) error {
	rules := allRules()
	index := map[string]int{}
	driver := sarifDriver{Name: "hookledger", Version: toolVersion}
	for i, r := range rules {
		index[r.ID] = i
		level := "error"
		if r.ID == "RT02" { // RT02 can only warn
			level = "warning"
		}
		driver.Rules = append(driver.Rules, sarifRule{
			ID:                   r.ID,
			ShortDescription:     sarifText{r.Title},
			FullDescription:      sarifText{r.Title + ". Columns: " + strings.Join(r.Needs(), ", ") + "."},
			Help:                 sarifText{r.Help},
			DefaultConfiguration: sarifRuleConf{level},
		})
	}
	uri := artifactURI(rep.Path)
	location := func(line int) []sarifLocation {
		if uri == "" {
			return nil
		}
		loc := sarifLocation{PhysicalLocation: sarifPhysical{ArtifactLocation: sarifArtifactLocation{URI: uri}}}
		if line > 0 {
			loc.PhysicalLocation.Region = &sarifRegion{StartLine: line}
		}
		return []sarifLocation{loc}
	}
	run := sarifRun{
		Tool:        sarifTool{Driver: driver},
		Invocations: []sarifInvocation{{ExecutionSuccessful: len(rep.Problems) == 0}},
		Results:     make([]sarifResult, 0, len(rep.Findings)),
		Properties:  map[string]Summary{"summary": rep.Summary},
	}
	if uri != "" {
		run.Artifacts = []sarifArtifact{{Location: sarifArtifactLocation{URI: uri}}}
	}
	for _, p := range rep.Problems {
		run.Invocations[0].ToolExecutionNotifications = append(run.Invocations[0].ToolExecutionNotifications,
			sarifNotification{Level: "error", Message: sarifText{p.Error()}, Locations: location(p.Line)})
	}
	for _, f := range rep.Findings {
		run.Results = append(run.Results, sarifResult{
			RuleID:     f.Rule,
			RuleIndex:  index[f.Rule],
			Level:      sarifLevel(f.Level),
			Message:    sarifText{f.Message},
			Locations:  location(f.Line),
			Properties: map[string]string{"flow": f.Flow, "level": string(f.Level)},
		})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(sarifLog{Schema: sarifSchema, Version: sarifVersion, Runs: []sarifRun{run}})
}

// artifactURI turns the inventory path into a URI reference: relative paths
// stay relative (code-scanning services resolve them against the checkout),
// absolute ones become file URIs.
func artifactURI(path string) string {
	if path == "" {
		return ""
	}
	p := filepath.ToSlash(path)
	if filepath.IsAbs(path) {
		if !strings.HasPrefix(p, "/") {
			p = "/" + p // a Windows drive path
		}
		return (&url.URL{Scheme: "file", Path: p}).String()
	}
	return (&url.URL{Path: p}).String()
}
