// Package push holds the template message model shared by the api and the
// workers: the message types and their data fields, the content rules of the
// messaging platform, the parser of a push request body, the message that
// travels through the queue, and the ucsId generator.
//
// The rules here are the single source of truth: schemas/push.schema.json is
// generated from them (see schema_gen_test.go) and tested to accept exactly
// the bodies that Parse accepts. A Parser made with the account's mapping of
// data fields to template keywords (platform.templates) also holds each mapped
// field to its keyword kind's rule (package platform/keyword), so that a push
// the front end accepts is never refused by the platform for its values.
//
// A ucsId (NewID) is a plain ULID: 26 characters, sortable by time, its
// random part from crypto/rand, so that ids cannot be guessed from one
// another.
package push

// Type is a message type code as sent in the "type" field of a push body,
// for example "TDL". The codes are case sensitive.
type Type string

// TypeTDL and the constants after it are the nine message types, in the
// order of the interface's table.
const (
	TypeTDL   Type = "TDL"
	TypeEN    Type = "EN"
	TypeJML   Type = "JML"
	TypeWR    Type = "WR"
	TypeJDS   Type = "JDS"
	TypeFWR   Type = "FWR"
	TypeMDAN  Type = "MDAN"
	TypeAR    Type = "AR"
	TypeOPPAN Type = "OPPAN"
)

// Limits of a single data value, in runes. The platform shows main items
// only and allows them 20 characters; header and remark are no longer shown
// at all, but they are stored and queued, so they are bounded too.
const (
	mainItemMaxRunes  = 20
	extraItemMaxRunes = 200
)

// maxFields bounds the fields of a type, so that the parser can keep its
// per-field state in arrays.
const maxFields = 8

// Field describes one key of the data object of a message type.
type Field struct {
	// Name is the key in the data object.
	Name string
	// Main reports whether the platform shows the field as a main content
	// item (every field but header and remark).
	Main bool
	// Required reports whether the field must be present and non-blank.
	// Every main item is required; header and remark are optional.
	Required bool
	// MaxRunes is the longest value accepted, counted in runes.
	MaxRunes int
	// DescZH and DescEN describe the field for the metadata dictionary.
	DescZH, DescEN string
}

// TypeSpec describes a message type: its code, what it means and the fields
// of its data object in display order.
type TypeSpec struct {
	Type                 Type
	MeaningZH, MeaningEN string
	Fields               []Field
}

func header() Field {
	return Field{Name: "header", MaxRunes: extraItemMaxRunes,
		DescZH: "首行内容（平台已不再显示）", DescEN: "First line (no longer shown by the platform)"}
}

func remark() Field {
	return Field{Name: "remark", MaxRunes: extraItemMaxRunes,
		DescZH: "备注（平台已不再显示）", DescEN: "Remark (no longer shown by the platform)"}
}

func item(name, zh, en string) Field {
	return Field{Name: name, Main: true, Required: true, MaxRunes: mainItemMaxRunes, DescZH: zh, DescEN: en}
}

// typeTable is the package's own copy; Types and LookupType hand out copies
// so that no caller can change the rules Parse applies.
var typeTable = []TypeSpec{
	{TypeTDL, "待办事项", "To-do item", []Field{
		header(),
		item("type", "待办类型", "Kind of to-do item"),
		item("list", "所属清单", "List the item belongs to"),
		item("step", "当前环节", "Current step"),
		item("content", "待办内容", "What is to be done"),
		remark(),
	}},
	{TypeEN, "考试通知", "Examination notice", []Field{
		header(),
		item("name", "考试名称", "Examination"),
		item("class", "考试班级或课程", "Class or course"),
		item("time", "考试时间", "Time of the examination"),
		remark(),
	}},
	{TypeJML, "作业消息提醒", "Job (assignment) message reminder", []Field{
		header(),
		item("class", "课程", "Course"),
		item("info", "作业信息", "About the assignment"),
		remark(),
	}},
	{TypeWR, "工作提醒", "Work reminder", []Field{
		header(),
		item("title", "工作名称", "Title of the work"),
		item("date", "日期", "Date"),
		item("content", "工作内容", "What is to be done"),
		remark(),
	}},
	{TypeJDS, "作业即将到期", "Job due soon", []Field{
		header(),
		item("name", "作业名称", "Assignment"),
		item("class", "课程", "Course"),
		item("deadline", "截止时间", "Deadline"),
		remark(),
	}},
	{TypeFWR, "故障预警提醒", "Fault warning reminder", []Field{
		header(),
		item("device", "设备名称", "Device"),
		item("fault", "故障内容", "Fault"),
		item("location", "故障位置", "Location"),
		item("time", "发生时间", "Time of occurrence"),
		remark(),
	}},
	{TypeMDAN, "监控设备告警通知", "Monitoring device alarm notification", []Field{
		header(),
		item("device", "设备名称", "Device"),
		item("alarm", "告警内容", "Alarm"),
		item("level", "告警级别", "Severity"),
		item("time", "告警时间", "Time of the alarm"),
		remark(),
	}},
	{TypeAR, "审批提醒", "Approval reminder", []Field{
		header(),
		item("title", "审批事项", "Matter to approve"),
		item("applicant", "申请人", "Applicant"),
		item("time", "申请时间", "Time of application"),
		remark(),
	}},
	{TypeOPPAN, "网上流程待审批通知", "Online process pending approval notice", []Field{
		header(),
		item("process", "流程名称", "Process"),
		item("applicant", "申请人", "Applicant"),
		item("node", "当前节点", "Current node of the process"),
		item("time", "提交时间", "Time of submission"),
		remark(),
	}},
}

// typeList is the message of an unknown type, built once.
var typeList = func() string {
	s := ""
	for i, t := range typeTable {
		if i > 0 {
			s += ", "
		}
		s += string(t.Type)
	}
	return s
}()

// spec returns the package's own TypeSpec of t, or nil. The hot path uses it
// to avoid the copies that LookupType makes.
func spec(t string) *TypeSpec {
	for i := range typeTable {
		if string(typeTable[i].Type) == t {
			return &typeTable[i]
		}
	}
	return nil
}

// Types returns the nine message types in the interface's order. The result
// is a fresh deep copy on every call: the caller may keep or change it
// without affecting the rules that Parse applies.
func Types() []TypeSpec {
	out := make([]TypeSpec, len(typeTable))
	for i, t := range typeTable {
		out[i] = t.clone()
	}
	return out
}

// LookupType returns the TypeSpec of the code t (exact case) and true, or a
// zero TypeSpec and false if t is not a message type. The Fields slice of the
// result is the caller's own copy.
func LookupType(t string) (TypeSpec, bool) {
	if s := spec(t); s != nil {
		return s.clone(), true
	}
	return TypeSpec{}, false
}

func (t TypeSpec) clone() TypeSpec {
	t.Fields = append([]Field(nil), t.Fields...)
	return t
}

// field returns the index of the data key name in t.Fields, or -1.
func (t *TypeSpec) field(name string) int {
	for i := range t.Fields {
		if t.Fields[i].Name == name {
			return i
		}
	}
	return -1
}
