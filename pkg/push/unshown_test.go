package push_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
)

// TestEmptyHeaderAndRemarkToUnshownKeywordsAreTaken: on an old industry template the optional
// header and remark go to first and remark, which the platform takes whatever they hold, empty
// too (and no longer shows). A push giving them as "" is sent by the platform, so the front end
// takes it too.
func TestEmptyHeaderAndRemarkToUnshownKeywordsAreTaken(t *testing.T) {
	const appID, secret, openid, tpl = "wx-industry", "industry-secret-0123456789", "o-industry", "tpl-industry"
	sim := simulator.New(simulator.Config{AppID: appID, Secret: secret, Seed: 1})
	sim.AddTemplate(tpl, []string{"first", "keyword1", "keyword2", "keyword3", "keyword4", "remark"})
	sim.AddFollower(openid)
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { srv.Close(); sim.Close() })
	c, err := platform.New(platform.Config{APIBase: srv.URL, AppID: appID, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{"header": "first", "type": "keyword1", "list": "keyword2", "step": "keyword3", "content": "keyword4", "remark": "remark"}
	p, err := push.NewParser(map[string]map[string]string{"TDL": fields})
	if err != nil {
		t.Fatal(err)
	}
	data := map[string]string{"header": "", "type": "请假审批", "list": "学生请假", "step": "辅导员审批", "content": "请审批", "remark": ""}
	kw := map[string]string{}
	for f, k := range fields {
		kw[k] = data[f]
	}
	if _, err := c.SendTemplate(context.Background(), platform.TemplateMessage{ToUser: openid, TemplateID: tpl, Data: kw}); err != nil {
		t.Fatalf("the platform refuses empty first and remark: %v", err)
	}
	body, err := json.Marshal(map[string]any{"userId": "2020000001", "type": "TDL", "data": data})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(body); err != nil {
		t.Fatalf("the platform takes empty first and remark, the front end refuses the push: %v", err)
	}
}
